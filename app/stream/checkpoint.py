"""The order of durability of the score engine, in one class: outputs → card state → ack.

A batch's outputs (served rows, actions, DLQ and late records) are sent at once. Once the broker
has acknowledged them, the changelog records of the cards the batch changed follow; once those
are acknowledged, the batch's source messages are acknowledged and may be committed. So:

- a card's stored position (the re-read fence, app.stream.cardrecord) is never durable before
  the outputs of the messages it covers: a re-read after a crash finds either the outputs and
  the state, or neither, and re-emits exactly the same records (same idempotency keys);
- an offset is never committed before the state that includes its message is durable.

Several batches can be in flight: while batch k waits for the broker, the engine folds and
scores k+1. Steps complete strictly in submission order; steps whose outputs are already
acknowledged are merged, so a card's changelog gets one record (its newest) per step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.stream import metrics

log = logging.getLogger(__name__)

#: card key → (source partition, card record bytes)
CardWrites = Mapping[bytes, tuple[int, bytes]]


class CardWriter(Protocol):
    """Where card records become durable (the card_state table and its changelog)."""

    async def write(self, cards: CardWrites) -> list[asyncio.Future[Any]]:
        """Store the records and send their changelog; returns the delivery futures."""


@dataclass(slots=True)
class _Step:
    outputs: list[asyncio.Future[Any]]
    cards: CardWrites
    messages: Sequence[Any]
    submitted: float = field(default_factory=time.perf_counter)


class CheckpointFailed(RuntimeError):
    """A step could not be made durable; the worker must stop (its source is read again)."""


class Checkpoint:
    """Moves submitted batches through outputs → card state → ack, in order (see the module)."""

    def __init__(self, send: Callable[[Any], Awaitable[list[asyncio.Future[Any]]]],
                 cards: CardWriter, ack: Callable[[Iterable[Any]], None], *,
                 max_in_flight: int = 4) -> None:
        self._send = send
        self._cards = cards
        self._ack = ack
        self._steps: deque[_Step] = deque()
        self._space = asyncio.Semaphore(max_in_flight)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.failed: BaseException | None = None
        self.completed = 0

    @property
    def in_flight(self) -> int:
        return len(self._steps)

    async def submit(self, records: Any, cards: CardWrites, messages: Sequence[Any]) -> None:
        """Send a batch's outputs now and queue its state and acks behind them."""
        if self.failed is not None:
            raise CheckpointFailed("an earlier batch was not made durable") from self.failed
        await self._space.acquire()
        try:
            outputs = await self._send(records)
        except BaseException:
            self._space.release()
            raise
        self._steps.append(_Step(outputs, cards, messages))
        self._idle.clear()
        self._wake.set()

    async def drain(self) -> None:
        """Wait until every submitted batch is acknowledged (or the checkpoint failed)."""
        while self._steps and self.failed is None:
            await self._idle.wait()
        if self.failed is not None:
            raise CheckpointFailed("a batch was not made durable") from self.failed

    async def run(self) -> None:
        """Complete steps in order until cancelled; a failure is kept in `failed` and raised."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._steps:
                    await self._complete_next()
                self._idle.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.failed = exc
            self._idle.set()
            log.error("a batch could not be made durable: %r", exc)
            raise

    async def _complete_next(self) -> None:
        head = self._steps[0]
        await asyncio.gather(*head.outputs)
        # every later step whose outputs are acknowledged already goes along with the head
        ready = 1
        while ready < len(self._steps) and all(f.done() for f in self._steps[ready].outputs):
            for fut in self._steps[ready].outputs:
                fut.result()  # raises a delivery error here, in order
            ready += 1
        steps = [self._steps[i] for i in range(ready)]
        now = time.perf_counter()
        for step in steps:
            metrics.HOP_SECONDS.labels("outputs_acked").observe(now - step.submitted)
        merged: dict[bytes, tuple[int, bytes]] = {}
        for step in steps:
            merged.update(step.cards)
        if merged:
            await asyncio.gather(*await self._cards.write(merged))
        for _ in steps:
            self._steps.popleft()
            self._space.release()
        for step in steps:
            self._ack(step.messages)
        self.completed += len(steps)
        metrics.CHECKPOINT_STEPS.observe(len(steps))
