"""Commits never pass an unprocessed message; stuck partitions are re-read from their commit."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from intervaltree import IntervalTree

from app.stream.offsets import UPSTREAM_NEW_OFFSET, CommitWatchdog, strict_new_offset


class FakeTP(tuple):
    @property
    def topic(self) -> str:
        return self[0]


class FakeConsumer:
    def __init__(self, committed: int | None, acked: list[int]) -> None:
        self.tp = FakeTP(("transactions", 6))
        self._acked = defaultdict(list, {self.tp: list(acked)})
        self._acked_index = defaultdict(set, {self.tp: set(acked)})
        self._committed_offset = defaultdict(lambda: None, {self.tp: committed})
        self._gap = defaultdict(IntervalTree)
        self.seeks: list[tuple[Any, int]] = []

    def assignment(self) -> set[Any]:
        return {self.tp}

    async def seek(self, tp: Any, offset: int) -> None:
        self.seeks.append((tp, offset))


def test_faust_would_commit_past_the_unacked_head_message() -> None:
    upstream = FakeConsumer(committed=100, acked=[101, 102, 103])
    # the upstream computation commits 104, skipping offset 100, which was never processed
    assert UPSTREAM_NEW_OFFSET(upstream, upstream.tp) == 104
    consumer = FakeConsumer(committed=100, acked=[101, 102, 103])
    assert strict_new_offset(consumer, consumer.tp) is None
    assert consumer._acked[consumer.tp] == [101, 102, 103]  # nothing dropped


def test_consecutive_acks_from_the_commit_are_committed() -> None:
    consumer = FakeConsumer(committed=100, acked=[102, 100, 101, 105])
    assert strict_new_offset(consumer, consumer.tp) == 103
    assert consumer._acked[consumer.tp] == [105]


def test_delivery_gaps_count_as_done() -> None:
    consumer = FakeConsumer(committed=100, acked=[100, 103])
    consumer._gap[consumer.tp].addi(101, 103)  # 101 and 102 never existed (compaction)
    assert strict_new_offset(consumer, consumer.tp) == 104


async def test_watchdog_rereads_a_partition_stuck_longer_than_the_stall() -> None:
    consumer = FakeConsumer(committed=5176, acked=[5178, 5179])
    dog = CommitWatchdog(["transactions"], stall_s=10)
    assert await dog.check(consumer, now=0.0) == 0
    assert await dog.check(consumer, now=9.0) == 0
    assert await dog.check(consumer, now=10.5) == 1
    assert consumer.seeks == [(consumer.tp, 5176)]


async def test_watchdog_leaves_healthy_and_unwatched_partitions_alone() -> None:
    healthy = FakeConsumer(committed=10, acked=[10, 11])
    other = FakeConsumer(committed=10, acked=[15])
    dog = CommitWatchdog(["actions"], stall_s=0)
    assert await dog.check(healthy, now=100) == 0
    dog = CommitWatchdog(["transactions"], stall_s=0)
    assert await dog.check(healthy, now=100) == 0
    assert await CommitWatchdog(["actions"], stall_s=0).check(other, now=100) == 0


async def test_seeks_run_on_the_consumer_thread_and_set_the_drain_target() -> None:
    """The seek is handed to the thread that owns the aiokafka consumer (never called from the
    app's loop), and the drain is told to hand over nothing of the partition before the target."""
    from types import SimpleNamespace

    from app.stream.offsets import _seek_targets, thread_safe_seek

    calls: list[tuple[str, Any, int]] = []

    def seek_on_thread(tp: Any, offset: int) -> None:
        calls.append(("seek", tp, offset))

    async def call_thread(fun: Any, *args: Any) -> None:
        calls.append(("call_thread", fun, 0))
        fun(*args)

    consumer: Any = SimpleNamespace(_thread=SimpleNamespace(seek=seek_on_thread,
                                                            call_thread=call_thread),
                                    app=SimpleNamespace(consumer_generation_id=7))
    tp = FakeTP(("transactions", 2))
    await thread_safe_seek(consumer, tp, 41)
    assert calls == [("call_thread", seek_on_thread, 0), ("seek", tp, 41)]
    assert _seek_targets(consumer)[tp][:2] == (41, 7)


async def test_no_commit_before_the_partition_start_is_known_then_the_watchdog_fills_it() -> None:
    """Upstream commits the first acked run wherever it starts when the group never committed:
    messages dropped during the first rebalance (offsets 0-2 here) would be skipped for good."""
    consumer = FakeConsumer(None, [3, 4, 5])
    assert UPSTREAM_NEW_OFFSET(consumer, consumer.tp) == 6  # upstream: 0-2 lost
    consumer = FakeConsumer(None, [3, 4, 5])
    assert strict_new_offset(consumer, consumer.tp) is None

    async def earliest_offsets(*tps: Any) -> dict[Any, int]:
        return dict.fromkeys(tps, 0)

    consumer.earliest_offsets = earliest_offsets  # type: ignore[attr-defined]
    watchdog = CommitWatchdog(["transactions"], stall_s=10)
    assert await watchdog.fill_unknown_commits(consumer) == 1  # type: ignore[arg-type]
    assert consumer._committed_offset[consumer.tp] == 0
    assert strict_new_offset(consumer, consumer.tp) is None  # 0 is not done: wait for it
    assert await watchdog.check(consumer, now=0.0) == 0  # type: ignore[arg-type]
    assert await watchdog.check(consumer, now=11.0) == 1  # type: ignore[arg-type]
    assert consumer.seeks == [(consumer.tp, 0)]


async def test_the_consumer_thread_fetches_for_a_copy_of_the_active_partitions() -> None:
    """Faust's live set is emptied by a rebalance while the thread fetches, and aiokafka reads
    an empty set as every partition: the thread gets a copy, and nothing when it is empty."""
    from types import SimpleNamespace

    from app.stream.offsets import snapshot_getmany

    seen: list[Any] = []

    async def getmany(active: Any, _timeout: float) -> dict[Any, list[Any]]:
        seen.append(active)
        active.clear()  # what a rebalance does to the live set meanwhile
        return {}

    consumer: Any = SimpleNamespace(_thread=SimpleNamespace(getmany=getmany))
    live = {FakeTP(("transactions", 0)), FakeTP(("transactions", 1))}
    await snapshot_getmany(consumer, live, 1.0)
    assert live == {FakeTP(("transactions", 0)), FakeTP(("transactions", 1))}
    assert await snapshot_getmany(consumer, set(), 1.0) == {}
    assert len(seen) == 1  # an empty set fetches nothing instead of everything


async def test_records_fetched_for_a_paused_partition_are_read_again(monkeypatch: Any) -> None:
    """Faust skips records of a partition paused while they were in flight, though the fetch
    moved the position past them: they are taken out and the partition is sought back."""
    from types import SimpleNamespace

    from app.stream import offsets

    active_tp, paused_tp, stale_tp = (FakeTP(("transactions", i)) for i in range(3))
    changelog_tp = FakeTP(("app-card_state-changelog", 0))

    def recs(start: int, n: int) -> list[Any]:
        return [SimpleNamespace(offset=o) for o in range(start, start + n)]

    records = {active_tp: recs(10, 3), paused_tp: recs(0, 5), stale_tp: recs(70, 2),
               changelog_tp: recs(0, 4)}

    async def upstream(self: Any, _timeout: float) -> Any:
        return records, {active_tp}

    monkeypatch.setattr(offsets, "_upstream_wait_next_records", upstream)
    seeks: list[tuple[Any, int]] = []

    async def seek(tp: Any, offset: int) -> None:
        seeks.append((tp, offset))

    consumer: Any = SimpleNamespace(
        _buffered_partitions=set(), seek=seek,
        _is_changelog_tp=lambda tp: tp.topic.endswith("-changelog"),
        assignment=lambda: {active_tp, paused_tp, stale_tp, changelog_tp})
    # a seek of stale_tp to 50 is pending: what it fetched before is not its place to restart
    offsets._seek_targets(consumer)[stale_tp] = (50, 1, 0.0)
    got, active = await offsets.hand_back_inactive(consumer, 1.0)
    assert active == {active_tp}
    assert set(got) == {active_tp, changelog_tp}  # Faust's getmany filters the changelog one
    assert [r.offset for r in got[active_tp]] == [10, 11, 12]
    assert seeks == [(paused_tp, 0)]
