"""A guard that re-reads a partition whose offset commit has been stuck too long.

Commits are strict (app.stream.kafka.consumer): a message read but never processed would hold its
partition's commit back for good while later messages keep being processed. Both loops take
whole chunks and admit them in order, so that should not happen; this watchdog is the guard
that repairs it if it does, and counts it (`fraudstream_rewinds_total{reason="commit stuck"}`,
which the fault suite asserts stays 0). A partition is stuck when its acknowledged offsets start
past its committed offset, or (with an `idle(topic)` probe) when it was fetched past its commit
(aiokafka's fetch position), nothing is acknowledged and the loop consuming it holds nothing;
held for `stall_s` at the same committed offset, it is rewound to the commit and read again.
That is safe by construction: card state recognises re-read transactions and re-emits the same
served rows and actions (same idempotency keys), which the action service absorbs. Nothing is
counted while the consumer's flow is stopped (a rebalance).
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
            gaps = getattr(consumer, "_gaps", {}).get(tp)
            if acked and gaps:  # commit markers acked ahead of a message still in work
                acked = [offset for offset in acked if offset not in gaps]
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
