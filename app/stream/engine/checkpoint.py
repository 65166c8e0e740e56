"""The order of durability of the score engine, in one class: outputs → card state → ack.

A batch's outputs (served rows, actions, DLQ and late records) are sent at once. Once the broker
has acknowledged them, the changelog records of the cards the batch changed follow; once those
are acknowledged, the batch's source messages are acknowledged and may be committed. So:

- a card's stored position (the re-read fence, app.stream.state.cardrecord) is never durable before
  the outputs of the messages it covers: a re-read after a crash finds either the outputs and
  the state, or neither, and re-emits exactly the same records (same idempotency keys);
- an offset is never committed before the state that includes its message is durable.

Several batches can be in flight: while batch k waits for the broker, the engine folds and
scores k+1. Steps complete strictly in submission order.

Under lag the card state need not follow every batch: a batch may be submitted without cards
(`cards=None`), its changed cards then go with the next batch that carries a snapshot (the
engine takes one every `state_interval`, when an idle input makes it due, and `seal`s the
newest batch before a drain). Such a durable point completes every batch before it at once:
their outputs are all acknowledged first, then one changelog record per card (its newest),
then all their messages are acked. A batch waiting only for a later snapshot no longer counts
as in flight (its outputs are acknowledged), so the bound is on outputs the broker has not
acknowledged yet.

exactly_once (`transactions` given, app.stream.engine.txnsink): outputs go into the open Kafka
transaction of their input partition as they are sent; each snapshot cuts those transactions
off from later outputs, and its durable point is their commit, holding the outputs, the card
changelog records and the input offsets at once. A durable point then completes the batches up
to the first snapshot not yet committed (each snapshot's transactions commit in turn), `served`
is told at the commit (what read_committed readers see), and the ack only records locally what
the transaction committed.
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


class Transactions(Protocol):
    """exactly_once: the Kafka transactions of the input partitions (app.stream.engine.txnsink)."""

    def cut(self, partitions: Iterable[int]) -> Any:
        """Close the open transactions to later outputs; what the next `commit` commits."""

    async def commit(self, cut: Any, offsets: Mapping[Any, int],
                     write_cards: Callable[[], Awaitable[list[asyncio.Future[Any]]]]) -> None:
        """Add the card changelog and the input offsets to the cut's transactions, commit."""


class CardWriter(Protocol):
    """Where card records become durable (the card_state table and its changelog)."""

    def stage(self, cards: CardWrites) -> None:
        """A snapshot taken, to be written later: reads of these cards must see it meanwhile."""

    async def write(self, cards: CardWrites) -> list[asyncio.Future[Any]]:
        """Send the records' changelog and store them; returns delivery futures still to wait."""


@dataclass(slots=True)
class _Step:
    outputs: list[asyncio.Future[Any]]
    #: the snapshot of every card changed up to this batch, or None: they go with a later one
    cards: CardWrites | None
    messages: Sequence[Any]
    submitted: float = field(default_factory=time.perf_counter)
    #: exactly_once: the transactions this step's snapshot commits
    cut: Any = None


class CheckpointFailed(RuntimeError):
    """A step could not be made durable; the worker must stop (its source is read again)."""


class Checkpoint:
    """Moves submitted batches through outputs → card state → ack, in order (see the module).

    `served` (optional) is told each batch's messages once its outputs are acknowledged.
    """

    def __init__(self, send: Callable[[Any], Awaitable[list[asyncio.Future[Any]]]],
                 cards: CardWriter, ack: Callable[[Iterable[Any]], None], *,
                 max_in_flight: int = 4,
                 served: Callable[[Sequence[Any]], None] | None = None,
                 transactions: Transactions | None = None) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self._send = send
        self._cards = cards
        self._ack = ack
        self._served = served
        self._txns = transactions
        self._uncut: set[int] = set()  # input partitions of the batches since the last cut
        self._steps: deque[_Step] = deque()
        self._acked_outputs = 0  # leading steps whose outputs the broker has acknowledged
        self._sealed = 0  # steps carrying a snapshot, not yet completed
        self._space = asyncio.Semaphore(max_in_flight)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.failed: BaseException | None = None
        self.completed = 0
        #: source messages submitted and not yet acked (served, or on their way, and waiting
        #: for their durable point): what the worker holds of its input
        self.held = 0

    @property
    def in_flight(self) -> int:
        """Batches submitted and not yet acked (outputs or state still to become durable)."""
        return len(self._steps)

    async def submit(self, records: Any, cards: CardWrites | None,
                     messages: Sequence[Any]) -> None:
        """Send a batch's outputs now and queue its state and acks behind them (`cards` None:
        its changed cards go with a later snapshot, see `seal`)."""
        if self.failed is not None:
            raise CheckpointFailed("an earlier batch was not made durable") from self.failed
        await self._space.acquire()
        try:
            outputs = await self._send(records)
        except BaseException:
            self._space.release()
            raise
        step = _Step(outputs, cards, messages)
        self._steps.append(step)
        self.held += len(messages)
        if self._txns is not None:
            self._uncut.update(m.partition for m in messages)
        if cards is not None:
            self._cards.stage(cards)
            self._sealed += 1
            self._cut(step)
        self._idle.clear()
        self._wake.set()

    def stage(self, cards: CardWrites) -> None:
        """Part of a snapshot not yet sealed: readable by the engine until it is stored."""
        self._cards.stage(cards)

    def seal(self, cards: CardWrites) -> None:
        """Give the newest batch, if it has none, the snapshot of the cards changed so far, so
        that every submitted batch can complete. Call it only between batches."""
        if self._steps and self._steps[-1].cards is None:
            self._cards.stage(cards)
            self._steps[-1].cards = cards
            self._sealed += 1
            self._cut(self._steps[-1])
            self._wake.set()

    def _cut(self, step: _Step) -> None:
        """exactly_once: the step's snapshot closes the transactions of the batches up to it."""
        if self._txns is not None:
            step.cut = self._txns.cut(self._uncut)
            self._uncut = set()

    @property
    def sealed(self) -> bool:
        """Whether every submitted batch can complete without another snapshot."""
        return not self._steps or self._steps[-1].cards is not None

    async def drain(self) -> None:
        """Wait until every batch up to the newest snapshot is durable and acked (or the
        checkpoint failed). Batches after it (never sealed) are left: their source is re-read."""
        while self._sealed and self.failed is None:
            self._idle.clear()
            await self._idle.wait()
        if self.failed is not None:
            raise CheckpointFailed("a batch was not made durable") from self.failed

    async def run(self) -> None:
        """Complete steps in order until cancelled; a failure is kept in `failed` and raised."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while await self._complete_next():
                    pass
                self._idle.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.failed = exc
            self._idle.set()
            log.error("a batch could not be made durable: %r", exc)
            raise

    async def _outputs_acked(self) -> None:
        """Wait, in order, for the outputs of every step not yet known acknowledged."""
        steps = self._steps
        while self._acked_outputs < len(steps):
            step = steps[self._acked_outputs]
            await asyncio.gather(*step.outputs)  # raises a delivery error here, in order
            self._acked_outputs += 1
            self._space.release()
            metrics.HOP_SECONDS.labels("outputs_acked").observe(
                time.perf_counter() - step.submitted)
            if self._served is not None and self._txns is None:
                self._served(step.messages)

    async def _complete_next(self) -> bool:
        """Complete every step up to the newest sealed one whose outputs are acknowledged;
        False when there is none (waiting for outputs or for a snapshot)."""
        await self._outputs_acked()
        steps = self._steps
        ready = 0
        merged: dict[bytes, tuple[int, bytes]] = {}
        for i in range(self._acked_outputs):
            cards = steps[i].cards
            if cards is not None:
                merged.update(cards)  # newest record per card wins
                ready = i + 1
                if self._txns is not None:
                    break  # each snapshot's transactions hold only the offsets up to it
        if not ready:
            return False
        if self._txns is not None:
            await self._commit(ready, merged)
        elif merged:
            await asyncio.gather(*await self._cards.write(merged))
        done = [steps.popleft() for _ in range(ready)]
        self._acked_outputs -= ready
        self._sealed -= sum(1 for step in done if step.cards is not None)
        for step in done:
            self.held -= len(step.messages)
            self._ack(step.messages)
            if self._served is not None and self._txns is not None:
                self._served(step.messages)
        self.completed += ready
        metrics.CHECKPOINT_STEPS.observe(ready)
        return True

    async def _commit(self, ready: int, cards: CardWrites) -> None:
        """exactly_once: the durable point of the first `ready` steps, one commit per input
        partition holding their outputs (sent already), `cards` and the offsets past them."""
        assert self._txns is not None
        offsets: dict[Any, int] = {}
        for i in range(ready):
            for message in self._steps[i].messages:
                if message.offset + 1 > offsets.get(message.tp, -1):
                    offsets[message.tp] = message.offset + 1

        async def write_cards() -> list[asyncio.Future[Any]]:
            return await self._cards.write(cards) if cards else []

        await self._txns.commit(self._steps[ready - 1].cut, offsets, write_cards)
