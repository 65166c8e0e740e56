"""The score engine: take fetched chunks, admit them in order, fold, score, hand to the checkpoint.

No waiting to fill a batch: the engine takes whatever chunks the consumer has queued (one at
least), up to `max_batch` messages, so an idle input is served at once and batches grow under
lag. A batch is folded and scored while earlier ones are still being made durable by the checkpoint
(app.stream.engine.checkpoint); its outputs (what latency is measured to) are sent at once.
Card state goes with a snapshot of the cards changed so far, taken after a batch's outputs are
sent (never on their way): under lag once every `state_interval_s`, so a card changed by many
batches meanwhile is serialized and written to the changelog once; when the input goes idle (a
live stream, between most batches) once `idle_state_interval_s` has passed since the last one,
so live batches share a changelog write and snapshots stay small. A snapshot is serialized
`SNAPSHOT_SLICE` cards at a time, between batches (a slice per batch while input waits), and the
checkpoint stores it a record batch at a time: no single step holds the loop for the whole
snapshot (at 19k ev/s one held 10k cards: 40 ms to serialize, up to 96 ms to store, and every
fetched event waited behind it). Under a load above what the
worker can make durable in step (every snapshot's changelog write competes with the batches for
the loop), the served messages awaiting their durable point would pile up in memory: past
`max_held` of them the engine takes its snapshot at once and waits for it before it takes more,
so the backlog waits in Kafka (consumer lag), not in the worker. A rebalance (a new
generation) first seals and drains the checkpoint, then drops the decoded card states:
partitions may have moved, and the table is the truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from faust.types import Message

from app.stream import metrics
from app.stream.engine.checkpoint import Checkpoint
from app.stream.engine.pipeline import TransactionPipeline
from app.stream.engine.scoring import ScoringStage
from app.stream.kafka.chunks import Chunk
from app.stream.kafka.sequencer import PartitionSequencer

log = logging.getLogger(__name__)

#: How long a stopping worker waits for its in-flight batches to become durable.
DRAIN_ON_STOP_S = 30.0
#: The most source messages the engine holds served and not yet durable (acked) before it
#: waits for their durable point: about two state intervals of a backlog (16k ev/s here).
MAX_HELD = 32_768  # FRAUDSTREAM_MAX_HELD
#: An input gone idle gets its snapshot once this long has passed since the last one (a live
#: stream goes idle between most batches: its snapshots stay small and frequent, under lag the
#: state interval applies).
IDLE_STATE_INTERVAL_S = 0.1
#: The most changed cards serialized in one go between two batches: a snapshot of more is taken
#: over several steps, with the batches that arrive meanwhile in between (at 19k ev/s a 1 s
#: snapshot held 10k cards: one 40 ms step that every fetched event waited behind).
SNAPSHOT_SLICE = 512


class ScoreEngine:
    """The score loop of one worker (see the module docstring)."""

    def __init__(self, app: Any, pipeline: TransactionPipeline, stage: ScoringStage,
                 sequencer: PartitionSequencer, checkpoint_factory: Callable[
                     [Callable[[Iterable[Message]], None]], Checkpoint], *,
                 topic: str, max_batch: int, state_interval_s: float = 0.0,
                 idle_state_interval_s: float = IDLE_STATE_INTERVAL_S,
                 max_held: int = MAX_HELD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if state_interval_s < 0 or idle_state_interval_s < 0:
            raise ValueError(f"state intervals must be >= 0, got {state_interval_s}, "
                             f"{idle_state_interval_s}")
        if max_held < 1:
            raise ValueError(f"max_held must be >= 1, got {max_held}")
        self.app = app
        self.pipeline = pipeline
        self.stage = stage
        self.sequencer = sequencer
        self.checkpoint = checkpoint_factory(self._ack)
        self.topic = topic
        self.max_batch = max_batch
        self.max_held = max_held
        self.state_interval_s = state_interval_s
        self.idle_state_interval_s = min(idle_state_interval_s, state_interval_s)
        self._clock = clock
        self._snapshot_at = clock()
        self._generation: int | None = None
        self._pending: Chunk | None = None
        #: a snapshot under way: the records of the cards serialized so far (staged already)
        self._partial: dict[bytes, tuple[int, bytes]] = {}
        self._snapshotting = False
        self._idle = asyncio.Event()
        self._idle.set()

    async def settle(self) -> None:
        """Wait until the batch being processed, if any, and every in-flight one are durable."""
        await self._idle.wait()
        self._seal()
        await self.checkpoint.drain()

    def busy(self) -> bool:
        """A batch is being processed (the consumer's fetches may then wait for more input)."""
        return not self._idle.is_set()

    def _seal(self) -> None:
        """Between batches: let every submitted batch complete (snapshot the changed cards)."""
        if self._snapshotting or not self.checkpoint.sealed:
            self._snapshot_step(None)

    def _snapshot_step(self, limit: int | None) -> None:
        """Between batches: serialize up to `limit` (None: all) more of the cards changed so
        far; once none is left, the snapshot goes with the newest batch. A card changed again
        by a batch in between is serialized again, later: the snapshot holds each card as the
        newest batch left it, so it covers every batch submitted before it is sealed."""
        part = self._card_writes(self.pipeline.snapshot(limit))
        if self.pipeline.changed_cards:  # more to come; the card cache may let these go meanwhile
            self.checkpoint.stage(part)
            self._partial.update(part)
            self._snapshotting = True
            return
        if self._partial:
            self._partial.update(part)
            part, self._partial = self._partial, {}
        self._snapshotting = False
        self.checkpoint.seal(part)
        self._snapshot_at = self._clock()

    async def run(self) -> None:
        """Process chunks until cancelled; in-flight batches are finished before it returns."""
        runner = asyncio.ensure_future(self.checkpoint.run())
        runner.add_done_callback(self._on_checkpoint_done)
        try:
            while True:
                chunk = await self._next()
                self._idle.clear()
                try:
                    await self.process(chunk)
                finally:
                    self._idle.set()
        except asyncio.CancelledError:
            # no changelog record of ours may reach Kafka after this worker left the group
            # (another worker may already have restored those cards): finish what is in flight.
            # Mid-batch (a batch folded, not submitted) no snapshot may be taken: the batches
            # after the last one are left unacked, their source is read again.
            if self._idle.is_set():
                self._seal()
            try:
                await asyncio.shield(asyncio.wait_for(self.checkpoint.drain(), DRAIN_ON_STOP_S))
            except Exception as exc:  # noqa: BLE001 - stopping anyway; its source is re-read
                log.warning("in-flight batches not finished on stop: %r", exc)
            raise
        finally:
            runner.cancel()

    def _on_checkpoint_done(self, task: asyncio.Future[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("stopping the worker: a batch could not be made durable (%r)", exc)
        asyncio.ensure_future(self.app.crash(exc))

    async def _next(self) -> Chunk:
        """The next batch. While submitted batches wait for a snapshot, an input that stays idle
        until the snapshot is due gets it then, slice by slice while nothing is fetched (they complete
        without a later batch)."""
        queue = self.app.consumer.chunk_queue(self.topic)
        while self._pending is None and queue.empty():
            if self._snapshotting:
                await asyncio.sleep(0)  # what became ready first: a fetch, the last sends
                if self._pending is None and queue.empty():
                    self._snapshot_step(SNAPSHOT_SLICE)
                continue
            if self.checkpoint.sealed:
                break
            due = self._snapshot_at + self.idle_state_interval_s - self._clock()
            if due <= 0:
                self._snapshotting = True  # taken slice by slice from here, input permitting
                continue
            with contextlib.suppress(TimeoutError):
                self._pending = await asyncio.wait_for(queue.get(), due)
        return await self._take()

    async def _take(self) -> Chunk:
        """The next batch: the queued chunks of one generation, up to `max_batch` messages."""
        queue = self.app.consumer.chunk_queue(self.topic)
        chunk = self._pending
        self._pending = None
        if chunk is None:
            chunk = await queue.get()
        messages = chunk.messages
        while len(messages) < self.max_batch and not queue.empty():
            nxt = queue.get_nowait()
            if nxt.generation != chunk.generation:
                self._pending = nxt
                break
            messages = messages + nxt.messages
        if len(messages) > self.max_batch:
            self._pending = Chunk(chunk.generation, messages[self.max_batch:])
            messages = messages[: self.max_batch]
        return Chunk(chunk.generation, messages)

    async def process(self, chunk: Chunk) -> None:
        """One batch: admit, fold, score, submit to the checkpoint."""
        consumer = self.app.consumer
        if chunk.generation != self.app.consumer_generation_id:
            consumer.release(chunk.messages)  # fetched before a rebalance: read again
            return
        if chunk.generation != self._generation:
            self._seal()
            await self.checkpoint.drain()
            self.pipeline.forget()
            self._generation = chunk.generation
        messages = await self.sequencer.admit(chunk.messages)
        if not messages:
            return
        now = time.time()
        metrics.observe_many(metrics.HOP_SECONDS.labels("append_to_engine"),
                             [max(0.0, now - m.timestamp) for m in messages])
        inbound = self.app.monitor.stream_inbound_time
        mono = time.monotonic()
        for tp in {m.tp for m in messages}:
            inbound[tp] = mono  # Faust's livelock detector: this partition is served
        metrics.BATCH_SIZE.observe(len(messages))
        t0 = time.perf_counter()
        outcome = self.pipeline.process(messages, snapshot=False)
        t1 = time.perf_counter()
        records = outcome.records
        records.extend(self.stage.run(outcome.scored))
        t2 = time.perf_counter()
        metrics.HOP_SECONDS.labels("features").observe(t1 - t0)
        metrics.HOP_SECONDS.labels("model").observe(t2 - t1)
        metrics.SCORED.inc(len(outcome.scored))
        await self.checkpoint.submit(records, None, messages)
        # the outputs are on their way: the card state, when due, is serialized after them,
        # a slice per batch while input waits (each slice at least twice what a batch adds)
        if not self.state_interval_s:
            self._seal()
        elif self._snapshotting or self._clock() - self._snapshot_at >= self.state_interval_s:
            self._snapshot_step(max(SNAPSHOT_SLICE, 2 * len(messages)))
        if self.checkpoint.held >= self.max_held:
            # more served than made durable: nothing more is taken until it is (the backlog
            # waits in Kafka, the worker's memory stays bounded)
            metrics.HELD_WAITS.inc()
            self._seal()
            await self.checkpoint.drain()

    @staticmethod
    def _card_writes(saves: dict[str, tuple[int, bytes]]) -> dict[bytes, tuple[int, bytes]]:
        return {card_id.encode(): saved for card_id, saved in saves.items()}

    def _ack(self, messages: Iterable[Message]) -> None:
        """The checkpoint's last step: the batch's messages may be committed."""
        self.app.consumer.ack_many(list(messages))

    @staticmethod
    def served(messages: Sequence[Message]) -> None:
        """A batch's outputs are acknowledged: event → served row, and freshness per partition."""
        now = time.time()
        metrics.observe_many(metrics.HOP_SECONDS.labels("event_to_served"),
                             [max(0.0, now - m.timestamp) for m in messages])
        newest: dict[Any, float] = {}
        for message in messages:
            newest[message.tp] = message.timestamp
        for tp, ts in newest.items():
            metrics.LAG_SECONDS.labels(tp.topic, str(tp.partition)).set(max(0.0, now - ts))
