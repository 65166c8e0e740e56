"""A watchdog that re-reads a partition whose offset commit has been stuck too long.

A message can be read but never processed (a rebalance interrupts its hand-over in a way the
consumer does not see), and then the partition's strict commit (app.stream.consumer) stalls
behind it for good while later messages keep being processed. The watchdog notices a partition
whose acknowledged offsets start past its committed offset for longer than `stall_s` and
rewinds it to the committed offset: everything from there is read again. That is safe by
construction: card state recognises re-read transactions and re-emits exactly the same served
rows and actions (same idempotency keys), which the action service absorbs.

A partition can also lose everything after its commit that way: fetched past it (aiokafka's
fetch position, which every hand-over moves), nothing acknowledged, and the agent consuming it holding nothing (between batches, its queue
empty). Then no later acknowledgement shows the gap. With an `idle(topic)` probe the watchdog
treats that state, held for `stall_s` at the same committed offset, as stuck too. Seen in CI
runs of worker-dies and worker-dies-rocksdb after the surviving worker took over a dead one's
partitions: the dispatch agent idle, `actions` read 47 messages past a commit that never moved;
another time three `actions` partitions fetched 36-55 messages past their commits that never
reached the agent (no read offset at all: only aiokafka's fetch position showed them).

Nothing is counted while the consumer's flow is stopped (a rebalance): a stall starts again
when it resumes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)


class CommitWatchdog:
    """Rewinds a partition to its committed offset when its commit has been stuck too long."""

    def __init__(self, topics: Iterable[str], *, stall_s: float,
                 idle: Callable[[str], bool] | None = None) -> None:
        self.topics = frozenset(topics)
        self.stall_s = stall_s
        #: topic -> True when the agent consuming it holds no message (see the module)
        self.idle = idle
        self._stuck_since: dict[Any, tuple[int, float]] = {}
        self.repairs = 0

    def stuck(self, consumer: Any) -> list[tuple[Any, int]]:
        """Partitions stuck right now: their first acknowledged offset lies past the committed
        one, or (with an idle probe) aiokafka handed out records past it (its fetch position),
        nothing is acknowledged and their agent holds nothing."""
        out = []
        positions = consumer.fetch_positions() if self.idle is not None else {}
        for tp in consumer.assignment():
            if tp.topic not in self.topics:
                continue
            committed = consumer._committed_offset.get(tp)
            if committed is None:
                continue
            acked = consumer._acked.get(tp)
            if acked:
                if min(acked) > committed:
                    out.append((tp, committed))
            elif (self.idle is not None and positions.get(tp, committed) > committed
                  and self.idle(tp.topic)):
                out.append((tp, committed))
        return out

    async def check(self, consumer: Any, now: float | None = None) -> int:
        """Repair partitions stuck for longer than `stall_s`; returns how many were repaired."""
        if not consumer.flow_active:  # a rebalance: nothing is being handed over
            self._stuck_since.clear()
            return 0
        await consumer.fill_unknown_commits(self.topics)
        now = time.monotonic() if now is None else now
        stuck = dict(self.stuck(consumer))
        for tp in list(self._stuck_since):
            if tp not in stuck:
                del self._stuck_since[tp]
        repaired = 0
        for tp, committed in stuck.items():
            at, since = self._stuck_since.get(tp, (committed, now))
            if at != committed:  # the commit moved: a new stall, if any, starts now
                since = now
            self._stuck_since[tp] = (committed, since)
            if now - since < self.stall_s:
                continue
            log.warning("%s: offset %d was read but never processed; re-reading from it",
                        tp, committed)
            await consumer.rewind(tp, committed, "commit stuck")
            del self._stuck_since[tp]
            repaired += 1
        self.repairs += repaired
        return repaired
