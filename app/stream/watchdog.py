"""A watchdog that re-reads a partition whose offset commit has been stuck too long.

A message can be read but never processed (a rebalance interrupts its hand-over in a way the
consumer does not see), and then the partition's strict commit (app.stream.consumer) stalls
behind it for good while later messages keep being processed. The watchdog notices a partition
whose acknowledged offsets start past its committed offset for longer than `stall_s` and
rewinds it to the committed offset: everything from there is read again. That is safe by
construction: card state recognises re-read transactions and re-emits exactly the same served
rows and actions (same idempotency keys), which the action service absorbs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)


class CommitWatchdog:
    """Rewinds a partition to its committed offset when its commit has been stuck too long."""

    def __init__(self, topics: Iterable[str], *, stall_s: float) -> None:
        self.topics = frozenset(topics)
        self.stall_s = stall_s
        self._stuck_since: dict[Any, float] = {}
        self.repairs = 0

    def stuck(self, consumer: Any) -> list[tuple[Any, int]]:
        """Partitions whose first acknowledged offset lies past the committed one, right now."""
        out = []
        for tp in consumer.assignment():
            if tp.topic not in self.topics:
                continue
            committed = consumer._committed_offset.get(tp)
            acked = consumer._acked.get(tp)
            if committed is not None and acked and min(acked) > committed:
                out.append((tp, committed))
        return out

    async def check(self, consumer: Any, now: float | None = None) -> int:
        """Repair partitions stuck for longer than `stall_s`; returns how many were repaired."""
        await consumer.fill_unknown_commits(self.topics)
        now = time.monotonic() if now is None else now
        stuck = dict(self.stuck(consumer))
        for tp in list(self._stuck_since):
            if tp not in stuck:
                del self._stuck_since[tp]
        repaired = 0
        for tp, committed in stuck.items():
            since = self._stuck_since.setdefault(tp, now)
            if now - since < self.stall_s:
                continue
            log.warning("%s: offset %d was read but never processed; re-reading from it",
                        tp, committed)
            await consumer.rewind(tp, committed, "commit stuck")
            del self._stuck_since[tp]
            repaired += 1
        self.repairs += repaired
        return repaired
