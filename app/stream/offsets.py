"""Offset commits that never skip an unprocessed message, and a watchdog that repairs stuck ones.

Faust commits, per partition, the end of the first run of consecutive acknowledged offsets. The
problems seen here under worker kills and rebalances (also reported upstream: faust-streaming
#312, #606; robinhood/faust #681):

1. Its head-of-queue check is off by one (`min(acked) - committed > 1`): when the one message at
   the committed offset was never acknowledged, Faust commits past it. That would lose the
   message on the next restart. `strict_new_offset` refuses to commit past any unacknowledged
   offset.
2. When the offsets it fetches jump, Faust records the skipped range as a "gap" and counts it as
   done, the fetched message included (meant for compacted or transactional topics). Our
   topics are neither, so offsets are contiguous and a jump means messages were skipped (for
   instance stale prefetched records after a rebalance), not that they do not exist:
   `install_strict_commits` turns gap recording off, so such messages stall the commit instead
   of being committed unprocessed.
3. A message can be read but never handed to the agent (the fetcher gives up delivering it when a
   rebalance suspends the flow, yet records it as read), so it is never acknowledged and the
   partition's commit stalls for good while later messages keep being processed. The watchdog
   notices a partition whose acknowledged offsets start past its committed offset for longer
   than `stall_s` and seeks it back to the committed offset: everything from there is read
   again. Re-reading is safe by construction: card state recognises the redelivered
   transactions and re-emits exactly the same served rows and actions (same idempotency keys),
   which the action service absorbs.
4. `Consumer.seek` reaches the aiokafka consumer from the app's event loop, though that
   consumer and its fetcher live on Faust's consumer thread. `thread_safe_seek` makes the
   call on that thread, as Faust already does for its own seek to the committed offsets.
   After a seek the drain loop hands over nothing of that partition until the target offset
   itself arrives: records fetched before the seek, delivered after it, would move the read
   offset past the target and the re-read would be discarded.
5. A partition the group never committed has no known committed offset, and Faust then
   commits the first run of acknowledged offsets wherever it starts. The messages it dropped
   during the workers' first rebalance would be committed unprocessed (lost actions, at the
   start of a run). `strict_new_offset` commits nothing there until `CommitWatchdog` has filled
   in the log start as the committed offset.
6. Faust hands the consumer thread its live set of active partitions, which a rebalance empties
   (recovery pauses everything) while a fetch is in flight; aiokafka then reads the empty set as
   "every partition" and drains them all, and Faust's `getmany` skips every record of a partition
   that is not active. The positions have moved past those records: a partition with a commit
   is sought back to it when recovery ends, but one the group never committed is not
   (aiokafka's `seek_to_committed` leaves it alone), so the new owner never saw its first
   messages and never processed that partition at all. `snapshot_getmany` passes a copy (and
   fetches nothing when it is empty); `hand_back_inactive` seeks a partition back to records
   fetched while it was paused instead of skipping them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from faust.transport.consumer import Consumer, ThreadDelegateConsumer
from faust.utils.functional import consecutive_numbers

from app.stream import metrics

log = logging.getLogger(__name__)

#: Faust's own computation, kept for comparison in tests.
UPSTREAM_NEW_OFFSET = Consumer._new_offset


def strict_new_offset(self: Consumer, tp: Any) -> int | None:
    """Faust's `Consumer._new_offset` without the off-by-one that skips an unacked message."""
    acked = self._acked[tp]
    if not acked:
        return None
    max_offset = max(acked)
    gap_for_tp = self._gap[tp]
    if gap_for_tp:
        # offsets Kafka never delivered (compaction, transaction markers) count as done
        candidates = sorted(gap_for_tp.overlap(0, max_offset), key=lambda x: x.begin)
        if candidates:
            fill: list[int] = []
            for entry in candidates:
                fill.extend(range(entry.begin, entry.end))
            acked.extend(fill)
            gap_for_tp.chop(0, max(fill[-1], max_offset + 1))
    acked.sort()
    committed = self._committed_offset[tp]
    if committed is None:
        return None  # where the partition starts is not known yet (CommitWatchdog fills it in)
    if acked[0] > committed:
        return None  # the message at `committed` is not done yet: never commit past it
    batch = next(consecutive_numbers(acked))
    acked[: len(batch)] = []
    self._acked_index[tp].difference_update(batch)
    return batch[-1] + 1


async def thread_safe_seek(self: ThreadDelegateConsumer, partition: Any, offset: int) -> None:
    """Faust's `_seek`, run on the consumer's own thread (see the module docstring, point 4).

    Upstream calls the aiokafka consumer's `seek` directly from the event loop of the app,
    while that consumer's fetcher runs on another thread and loop: the position change races
    with an in-flight fetch, whose records can then move the position past the target
    (messages skipped) or wake nobody (the partition stalls).
    """
    # set before the seek: from here on, the drain hands over nothing of this partition
    # until the target itself arrives (records fetched before the seek are stale)
    _seek_targets(self)[partition] = (offset, self.app.consumer_generation_id, time.monotonic())
    await self._thread.call_thread(self._thread.seek, partition, offset)


#: A seek target not seen within this many seconds stops filtering (never drop silently for long).
SEEK_TARGET_TTL_S = 3.0


def _seek_targets(consumer: Consumer) -> dict[Any, tuple[int, int, float]]:
    targets = consumer.__dict__.get("_fraudstream_seek_targets")
    if targets is None:
        targets = consumer.__dict__["_fraudstream_seek_targets"] = {}
    return targets


async def snapshot_getmany(self: ThreadDelegateConsumer, active_partitions: Any,
                           timeout: float) -> Any:  # noqa: ASYNC109 - Faust's signature
    """Faust's `_getmany`, handing the consumer thread a copy of the active partitions.

    Upstream passes its live set, which the app's loop keeps changing (a rebalance pauses every
    partition) while the thread fetches; aiokafka reads an empty set as "every partition".
    """
    if active_partitions is not None:
        active_partitions = set(active_partitions)
        if not active_partitions:
            return {}
    return await self._thread.getmany(active_partitions, timeout)


_upstream_wait_next_records = Consumer._wait_next_records


async def hand_back_inactive(self: Consumer, timeout: float) -> Any:  # noqa: ASYNC109
    """Faust's `_wait_next_records`, except that records fetched for a partition that is not
    active any more are handed back: the partition is sought back to the first of them.

    Faust's `getmany` skips such records, though fetching them already moved the position past
    them: they would be lost to this consumer, and nothing after them shows the gap (see the
    module docstring, point 6).
    """
    records, active = await _upstream_wait_next_records(self, timeout)
    if not records or active is None:
        return records, active
    for tp in [tp for tp in records if tp not in active and tp not in self._buffered_partitions
               and not self._is_changelog_tp(tp)]:  # table recovery positions its own
        dropped = records.pop(tp)
        if not dropped:
            continue
        metrics.FETCH_HANDED_BACK.labels(tp.topic).inc(len(dropped))
        log.info("%s: %d records from offset %d fetched while the partition was paused; "
                 "reading them again", tp, len(dropped), dropped[0].offset)
        target = _seek_targets(self).get(tp)
        if target is not None and target[0] != dropped[0].offset:
            continue  # fetched before a pending seek: that seek reads them again already
        if tp in self.assignment():
            try:
                await self.seek(tp, dropped[0].offset)
            except Exception as exc:  # noqa: BLE001 - revoked meanwhile: its next owner reads it
                log.info("%s: not sought back (%r); its next owner starts at the commit",
                         tp, exc)
    return records, active


async def _no_gap(self: Consumer, tp: Any, offset_from: int, offset_to: int) -> None:
    """Never count unfetched offsets as done (see the module docstring, point 2)."""


def install_strict_commits() -> None:
    """Replace Faust's offset bookkeeping (idempotent; process-wide)."""
    if Consumer._new_offset is not strict_new_offset:
        Consumer._new_offset = strict_new_offset  # type: ignore[method-assign]
        Consumer._add_gap = _no_gap  # type: ignore[method-assign]
        Consumer._drain_messages = ordered_drain_messages  # type: ignore[method-assign]
        ThreadDelegateConsumer._seek = thread_safe_seek  # type: ignore[method-assign]
        Consumer._wait_next_records = hand_back_inactive  # type: ignore[method-assign]
        ThreadDelegateConsumer._getmany = snapshot_getmany  # type: ignore[method-assign]


class CommitWatchdog:
    """Seeks a partition back to its committed offset when its commit has been stuck too long."""

    def __init__(self, topics: Iterable[str], *, stall_s: float) -> None:
        self.topics = frozenset(topics)
        self.stall_s = stall_s
        self._stuck_since: dict[Any, float] = {}
        self.repairs = 0

    async def fill_unknown_commits(self, consumer: Consumer) -> int:
        """Take the log start as the committed offset of partitions the group never committed.

        Faust leaves such a partition's committed offset unknown (None) and then commits the
        first run of acknowledged offsets wherever it starts: messages read but never handed
        over right after the first rebalance (Faust drops them while the flow is suspended)
        would be committed unprocessed. With the log start in place, the strict commit waits
        for them and `check` re-reads them.
        """
        unknown = [tp for tp in consumer.assignment()
                   if tp.topic in self.topics and consumer._committed_offset.get(tp) is None]
        if not unknown:
            return 0
        earliest = await consumer.earliest_offsets(*unknown)
        filled = 0
        for tp in unknown:
            start = earliest.get(tp)
            if start is not None and consumer._committed_offset.get(tp) is None:
                consumer._committed_offset[tp] = start
                filled += 1
        return filled

    def stuck(self, consumer: Consumer) -> list[tuple[Any, int]]:
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

    async def check(self, consumer: Consumer, now: float | None = None) -> int:
        """Repair partitions stuck for longer than `stall_s`; returns how many were repaired."""
        await self.fill_unknown_commits(consumer)
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
            await consumer.seek(tp, committed)
            del self._stuck_since[tp]
            repaired += 1
        self.repairs += repaired
        return repaired


async def ordered_drain_messages(self: Consumer, fetcher: Any) -> None:  # pragma: no cover
    """Faust's `Consumer._drain_messages`, except that a message whose hand-over to the agent
    was interrupted (a rebalance suspends the flow, or the consumer stops) is not recorded as
    read: its partition is sought back to it and nothing after it in that fetch is handed over.

    Upstream records the interrupted message as read and goes on with the next one, so the agent
    sees later transactions of a card before an earlier one (which then arrives out of order or
    late once re-read) and the commit can stall behind it; see the module docstring, point 3.
    """
    from faust.transport.consumer import CONSUMER_FETCHING

    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = self._stopped.is_set
    fetcher_should_stop = fetcher._stopped.is_set
    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    commit_every = self._commit_every
    num_since_yield = 0
    try:
        while not (consumer_should_stop() or fetcher_should_stop()):
            self.diag.set_flag(CONSUMER_FETCHING)
            targets = _seek_targets(self)
            ait = getmany(timeout=1.0)
            await self.sleep(0)
            if self.should_stop:
                continue
            interrupted: set[Any] = set()
            async for tp, message in ait:
                num_since_yield += 1
                if num_since_yield > 100:
                    await asyncio.sleep(0)
                    num_since_yield = 0
                if tp in interrupted:
                    continue  # everything after an interrupted hand-over is fetched again
                target = targets.get(tp)
                if target is not None:
                    if (target[1] != self.app.consumer_generation_id
                            or time.monotonic() - target[2] > SEEK_TARGET_TTL_S):
                        # a rebalance sought everything to the commits since, or the target
                        # never came: hand over again (the sequencer catches any gap)
                        del targets[tp]
                    elif message.offset != target[0]:
                        continue  # fetched before the seek: stale, it is read again from there
                    else:
                        del targets[tp]
                offset = message.offset
                r_offset = get_read_offset(tp)
                if r_offset is not None and offset < r_offset:
                    continue  # already read (a re-fetch after a seek)
                if commit_every is not None and self._n_acked >= commit_every:
                    self._n_acked = 0
                    await self.commit()
                delivery = callback(message)
                result = await self.wait_first(delivery, self.suspend_flow.wait())
                if delivery in result.done:
                    set_read_offset(tp, offset)
                    continue
                interrupted.add(tp)
                log.info("%s: hand-over of offset %d interrupted; it will be read again", tp, offset)
                try:
                    await self.seek(tp, offset)
                except Exception as exc:  # noqa: BLE001 - revoked meanwhile: its next owner reads it
                    log.info("%s: not sought back (%r); its next owner starts at the commit",
                             tp, exc)
            self.diag.unset_flag(CONSUMER_FETCHING)
    except self.consumer_stopped_errors:
        if self.transport.app.should_stop:
            return
        raise
    except asyncio.CancelledError:
        if self.transport.app.should_stop:
            return
        raise
    finally:
        self.diag.unset_flag(CONSUMER_FETCHING)


def consumer_state(consumer: Consumer) -> dict[str, Any]:
    """A snapshot of the consumer's flow and per-partition bookkeeping, for diagnosing stalls
    (served as JSON on a worker's /debug/consumer page). Read without locks: indicative only."""

    def name(tp: Any) -> str:
        return f"{tp.topic}:{tp.partition}"

    def names(tps: Iterable[Any] | None) -> list[str]:
        return sorted(name(tp) for tp in tps or ())

    app = consumer.app
    targets = _seek_targets(consumer)
    partitions: dict[str, dict[str, Any]] = {}
    for tp in consumer.assignment():
        acked = consumer._acked.get(tp) or []
        target = targets.get(tp)
        partitions[name(tp)] = {
            "read": consumer._read_offset.get(tp),
            "committed": consumer._committed_offset.get(tp),
            "acked_min": min(acked) if acked else None,
            "acked": len(acked),
            "seek_target": None if target is None else target[0],
        }
    state: dict[str, Any] = {
        "generation": app.consumer_generation_id,
        "flow_active": consumer.flow_active,
        "can_resume_flow": consumer.can_resume_flow.is_set(),
        "suspend_flow": consumer.suspend_flow.is_set(),
        "in_recovery": bool(getattr(app, "in_recovery", False)),
        "active": names(consumer._active_partitions),
        "paused": names(consumer._paused_partitions),
        "buffered": names(consumer._buffered_partitions),
        "unacked": len(consumer._unacked_messages),
        "partitions": partitions,
        "conductor": {name(tp): sorted(hex(id(c)) for c in chans)
                      for tp, chans in getattr(app.topics, "_tp_index", {}).items()},
        "callbacks": names(getattr(app.topics, "_tp_to_callback", {})),
        "channels": {hex(id(c)): [str(c), c.queue.qsize()] for c in app.topics},
    }
    inner = getattr(getattr(consumer, "_thread", None), "_consumer", None)
    if inner is not None:
        subscription = inner._subscription.subscription
        assignment = None if subscription is None else subscription.assignment
        states = {} if assignment is None else assignment._tp_state
        state["kafka"] = {
            "paused": names(inner.paused()),
            "positions": {name(tp): s._position for tp, s in states.items()},
            "fetched": names(getattr(inner._fetcher, "_records", {}).keys()),
        }
    return state
