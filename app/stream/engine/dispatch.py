"""The dispatcher: POST every action to the action service until it lands, or dead-letter it.

It takes whole fetched chunks of the actions topic from the consumer (as the score engine takes
transactions), never Faust's per-message hand-over: a rebalance cannot lose a handed-over action,
it only drops chunks not yet taken (released, read again by the partition's owner). A chunk of an
older generation is released; its partitions are admitted in offset order with no gap
(app.stream.kafka.sequencer); the batch's messages are acked once every action in it is delivered or
dead-lettered, and released instead when a rebalance came meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from app.actions.action import Action, ActionError
from app.actions.delivery import ActionDeliverer, DeliveryResult, Rejected
from app.kafka import topics
from app.kafka.records import H_SOURCE_APPENDED_MS, OutRecord, SourceMessage, rejected_record
from app.stream import metrics
from app.stream.kafka.chunks import Chunk
from app.stream.kafka.sequencer import PartitionSequencer

log = logging.getLogger(__name__)


async def dispatch_batch(
    deliverer: ActionDeliverer, batch: Sequence[SourceMessage]
) -> list[OutRecord]:
    """Deliver a batch concurrently; returns the actions.dlq records for what was refused.

    `deliver` retries retryable failures without limit, so this returns only when every action
    is delivered or refused for good: while the service is down the agent stops pulling, lag
    grows, and no offset is committed past an undelivered action.
    """
    dlq: list[OutRecord] = []
    parsed: list[tuple[SourceMessage, Action]] = []
    for msg in batch:
        try:
            parsed.append((msg, Action.from_json(msg.value)))
        except ActionError as exc:
            dlq.append(rejected_record(topics.ACTIONS_DLQ, msg, code=f"invalid_{exc.code}",
                                       reason=str(exc), field=exc.field))
    results = await _deliver_in_card_order(deliverer, [action for _, action in parsed])
    for (msg, action), result in zip(parsed, results, strict=True):
        if isinstance(result, Rejected):
            log.warning("action %s refused with %d: dead-lettered", action.idempotency_key,
                        result.status)
            dlq.append(rejected_record(topics.ACTIONS_DLQ, msg, code=f"http_{result.status}",
                                       reason=result.body))
    return dlq


async def _deliver_in_card_order(
    deliverer: ActionDeliverer, actions: Sequence[Action]
) -> list[DeliveryResult]:
    """Deliver concurrently across cards, strictly in log order within a card.

    A card's actions share a partition, so log order is decision order; keeping it means the
    transaction that froze a card is always the first one that decided to, as the oracle says.
    """
    by_card: dict[str, list[int]] = defaultdict(list)
    for i, action in enumerate(actions):
        by_card[action.card_id].append(i)
    results: list[DeliveryResult | None] = [None] * len(actions)

    answered = metrics.HOP_SECONDS.labels("action_answered")

    async def run(indices: list[int]) -> None:
        for i in indices:
            t0 = time.perf_counter()
            results[i] = await deliverer.deliver(actions[i])
            answered.observe(time.perf_counter() - t0)

    await asyncio.gather(*(run(ix) for ix in by_card.values()))
    return [r for r in results if r is not None]


class Dispatcher:
    """The dispatch loop of one worker (see the module docstring).

    `send` produces OutRecords (FraudApp.send); `deliverer` opens the HTTP client (an async
    context manager giving an ActionDeliverer).
    """

    def __init__(self, app: Any, topic: str, send: Callable[[Sequence[OutRecord]], Awaitable[Any]],
                 deliverer: Callable[[], Any], *, max_batch: int) -> None:
        self.app = app
        self.topic = topic
        self.send = send
        self.deliverer = deliverer
        self.max_batch = max_batch
        self.sequencer = PartitionSequencer(app)
        self._idle = asyncio.Event()
        self._idle.set()

    def idle(self) -> bool:
        """No action message held: none in a batch, none queued (the commit watchdog asks)."""
        return self._idle.is_set() and self.app.consumer.chunk_queue(self.topic).empty()

    async def settle(self) -> None:
        """Wait until the batch being delivered, if any, is done (a revoke commits it)."""
        await self._idle.wait()

    async def run(self) -> None:
        """Deliver chunks until cancelled."""
        async with self.deliverer() as deliverer:
            while True:
                chunk = await self._take()
                self._idle.clear()
                try:
                    await self.process(deliverer, chunk)
                finally:
                    self._idle.set()

    async def _take(self) -> Chunk:
        """The queued chunks of one generation, up to `max_batch` messages (no waiting)."""
        queue = self.app.consumer.chunk_queue(self.topic)
        chunk: Chunk = await queue.get()
        messages = chunk.messages
        while len(messages) < self.max_batch and not queue.empty():
            nxt: Chunk = queue._queue[0]  # noqa: SLF001 - peek: another generation stays queued
            if nxt.generation != chunk.generation:
                break
            messages = messages + queue.get_nowait().messages
        return Chunk(chunk.generation, messages)

    async def process(self, deliverer: ActionDeliverer, chunk: Chunk) -> None:
        """One batch: admit in order, deliver, dead-letter the refused, ack."""
        consumer = self.app.consumer
        if chunk.generation != self.app.consumer_generation_id:
            consumer.release(chunk.messages)  # fetched before a rebalance: read again
            return
        messages = await self.sequencer.admit(chunk.messages)
        if not messages:
            return
        batch = [SourceMessage(m.topic, m.partition, m.offset, m.key, m.value) for m in messages]
        dlq = await dispatch_batch(deliverer, batch)
        _observe_event_to_effect(messages)
        await self.send(dlq)
        if chunk.generation != self.app.consumer_generation_id:
            consumer.release(messages)  # its partitions may have moved: their owner re-reads
            return
        consumer.ack_many(messages)


def _observe_event_to_effect(messages: Sequence[Any]) -> None:
    """Broker append of each action's transaction → its action answered (now)."""
    now_ms = time.time() * 1000
    hop = metrics.HOP_SECONDS.labels("event_to_effect")
    for message in messages:
        for name, value in message.headers or ():
            if name == H_SOURCE_APPENDED_MS:
                hop.observe(max(0.0, now_ms - int(value)) / 1000)
