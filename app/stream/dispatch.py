"""The dispatch agent: POST every action to the action service until it lands, or dead-letter it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import faust

from app.actions.action import Action, ActionError
from app.actions.delivery import ActionDeliverer, DeliveryResult, Rejected
from app.settings import Settings
from app.stream import metrics, topics
from app.stream.records import H_SOURCE_APPENDED_MS, OutRecord, SourceMessage, rejected_record

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


class DispatchActivity:
    """Whether the dispatch agent holds any action message: inside a batch, or queued for it.

    The commit watchdog asks it (app.stream.watchdog): a partition read past its commit with
    nothing acknowledged while the agent holds nothing has lost what was handed over.
    """

    def __init__(self) -> None:
        self.busy = False
        self.queue: Any = None  # the agent's channel queue, once the agent runs

    def idle(self) -> bool:
        return not self.busy and (self.queue is None or self.queue.empty())


def add_dispatch_agent(app: faust.App, settings: Settings, send: object) -> DispatchActivity:
    """Register the `dispatch` agent on `app`; `send` produces OutRecords (FraudApp.send).
    Returns the agent's activity (for the commit watchdog)."""
    activity = DispatchActivity()
    source = app.topic(settings.topic(topics.ACTIONS), key_type=bytes, value_type=bytes,
                       key_serializer="raw", value_serializer="raw",
                       partitions=settings.topic_partitions, replicas=settings.replication)

    @app.agent(source, name="dispatch")
    async def dispatch(stream: faust.StreamT) -> None:  # pragma: no cover - end to end
        async with ActionDeliverer(settings) as deliverer:
            # acked only once every action of the batch is delivered or dead-lettered
            stream.enable_acks = False  # never auto-acks (see the score agent)
            activity.queue = stream.channel.queue
            async for events in stream.noack_take(settings.dispatch_concurrency * 4,
                                                  within=settings.max_wait_s):
                activity.busy = True
                try:
                    batch = [SourceMessage(e.message.topic, e.message.partition,
                                           e.message.offset, e.message.key, e.message.value)
                             for e in events]
                    dlq = await dispatch_batch(deliverer, batch)
                    _observe_event_to_effect(events)
                    await send(dlq)  # type: ignore[operator]
                    for event in events:
                        await stream.ack(event)
                finally:
                    activity.busy = False

    return activity


def _observe_event_to_effect(events: Sequence[faust.types.EventT]) -> None:
    """Broker append of each action's transaction → its action answered (now)."""
    now_ms = time.time() * 1000
    hop = metrics.HOP_SECONDS.labels("event_to_effect")
    for event in events:
        for name, value in event.message.headers or ():
            if name == H_SOURCE_APPENDED_MS:
                hop.observe(max(0.0, now_ms - int(value)) / 1000)
