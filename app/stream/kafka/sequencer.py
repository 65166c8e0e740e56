"""Lets an agent see each partition's messages strictly in offset order, with no gap.

Card state is folded in log order and fenced by source position (app.stream.state.cardrecord), so a
message handed to an agent after a later one of its partition would be skipped as already applied,
or routed late. Faust can do exactly that around rebalances: a fetched message that was never
delivered to the stream is counted as read while the next ones flow on (see
app.stream.kafka.consumer). The sequencer checks every message against the next offset it expects
for the partition: a message past it holds the partition back (it is released unacknowledged, with
every later one) and the partition is rewound to the expected offset, so the missing message and
everything after it are read again, in order. A timer (`check`) rewinds again when a partition
stays held: records fetched before a rewind can still be delivered after it, so the first rewind
does not always take.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from faust.types import Message

from app.stream import metrics

log = logging.getLogger(__name__)


class PartitionSequencer:
    """Admits messages in offset order per partition; rewinds over a gap (see the module)."""

    def __init__(self, app: Any, *, reseek_after_s: float = 3.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.reseek_after_s = reseek_after_s
        self.clock = clock
        self._generation: int | None = None
        self._expected: dict[Any, int] = {}
        self._sought: dict[Any, tuple[int, float]] = {}

    async def admit(self, messages: Sequence[Message]) -> list[Message]:
        """The messages that may be processed now, in order; the others are released unacked."""
        consumer = self.app.consumer
        generation = self.app.consumer_generation_id
        if generation != self._generation:  # a rebalance: Faust sought to the commits again
            self._generation = generation
            self._expected.clear()
            self._sought.clear()
        assigned = consumer.assignment()
        admitted: list[Message] = []
        held: set[Any] = set()
        released: list[Message] = []
        again: list[Message] = []
        for message in messages:
            tp, offset = message.tp, message.offset
            if tp not in assigned or tp in held:
                released.append(message)
                continue  # revoked (its new owner reads it), or behind a gap of its partition
            expected = self._expected.get(tp)
            if expected is None:
                expected = await self._start_of(consumer, tp)
            if offset > expected:
                # a topic written in transactions skips its commit markers
                # (app.stream.kafka.commits)
                expected = consumer.passed(tp, expected)
            if offset > expected:
                held.add(tp)
                released.append(message)
                await self._rewind(consumer, tp, expected, offset)
                continue
            if offset < expected:
                # read again after a rewind, in this generation: this worker already processed
                # it (its first copy is acked by the checkpoint); processing it twice would
                # re-send its DLQ or late record, which no card position fences
                again.append(message)
                continue
            self._expected[tp] = offset + 1
            self._sought.pop(tp, None)
            admitted.append(message)
        if again:
            metrics.REREAD_DROPPED.inc(len(again))
            consumer.release(again)
        if released:
            metrics.SEQUENCE_HELD.labels(released[0].topic).inc(len(released))
            consumer.release(released)
        return admitted

    def state(self) -> dict[str, Any]:
        """What the sequencer expects and waits for, per partition (diagnostics)."""
        return {"generation": self._generation,
                "expected": {f"{tp.topic}:{tp.partition}": n for tp, n in self._expected.items()},
                "waiting_for": {f"{tp.topic}:{tp.partition}": n
                                for tp, (n, _) in self._sought.items()}}

    async def check(self) -> int:
        """Rewind again every partition held back for `reseek_after_s`; returns how many."""
        if self.app.consumer_generation_id != self._generation:
            return 0  # the next batch starts over from the commits
        consumer = self.app.consumer
        assigned = consumer.assignment()
        now = self.clock()
        stuck = [(tp, expected) for tp, (expected, at) in self._sought.items()
                 if tp in assigned and now - at >= self.reseek_after_s]
        for tp, expected in stuck:
            log.warning("%s: still waiting for offset %d; reading again from it", tp, expected)
            self._sought[tp] = (expected, now)
            await consumer.rewind(tp, expected, "still waiting")
        return len(stuck)

    async def _start_of(self, consumer: Any, tp: Any) -> int:
        """Where this partition's processing resumes: the group's commit, else the log start."""
        committed = consumer._committed_offset.get(tp)
        if committed is not None:
            return int(committed)
        earliest = (await consumer.earliest_offsets(tp)).get(tp)
        return int(earliest or 0)

    async def _rewind(self, consumer: Any, tp: Any, expected: int, got: int) -> None:
        last = self._sought.get(tp)
        now = self.clock()
        if last is not None and last[0] == expected and now - last[1] < self.reseek_after_s:
            return  # already rewound to it; the rest of the old fetch is still draining
        log.warning("%s: offset %d arrived before %d; reading again from %d", tp, got, expected,
                    expected)
        self._sought[tp] = (expected, now)
        await consumer.rewind(tp, expected, "gap")
