"""Seeks: one rewind, seeks on the consumer thread, the committed offsets and log start at
assignment."""

from __future__ import annotations

from types import SimpleNamespace

from faust.types import TP
from stream_support import ACT, A, B, acked, call_now, eos_consumer, fetched, real_consumer


async def test_rewind_seeks_on_the_consumer_thread_and_filters_until_the_target() -> None:
    consumer, broker = real_consumer({A: 10})
    consumer._read_offset[A] = 40
    assert await consumer.rewind(A, 41, "gap") is True
    assert broker.seeks == [(A, 41)]
    assert consumer._read_offset[A] == 41
    assert consumer._stale(A, 45)  # fetched before the seek
    assert not consumer._stale(A, 41)  # the target itself arrives: the filter is done
    assert A not in consumer.seek_targets


async def test_rewind_of_a_revoked_partition_does_nothing() -> None:
    consumer, broker = real_consumer({A: 10}, assigned={B})
    assert await consumer.rewind(A, 10, "gap") is False
    assert broker.seeks == []


async def test_a_rewind_queued_behind_a_rebalance_is_dropped() -> None:
    """The consumer thread runs a rewind asked during a rebalance only after it: seeking then
    would land after the new generation's seek to the commits and skip what lies between."""
    consumer, broker = real_consumer({A: 16})

    async def call_after_rebalance(fun, *args):
        consumer.app.consumer_generation_id = 2  # the rebalance completes first
        return fun(*args)

    consumer._thread.call_thread = call_after_rebalance
    consumer._read_offset[A] = 16
    assert await consumer.rewind(A, 40, "hand-over interrupted") is False
    assert broker.seeks == []
    assert consumer._read_offset[A] == 16


async def test_uncommitted_partitions_start_at_the_log_start_when_assigned() -> None:
    consumer, _ = real_consumer({A: 7, B: None})
    assert await consumer.fill_unknown_commits(frozenset({"transactions"})) == 1
    assert consumer._committed_offset[A] == 7
    assert consumer._committed_offset[B] == 3
    acked(consumer, B, [3, 4])
    assert consumer._new_offset(B) == 5  # commits at once: no re-read at the next rebalance


async def test_assignment_asks_for_every_committed_offset_in_one_request() -> None:
    consumer, _ = real_consumer({})
    asked: list[list[TP]] = []
    seeks: list[tuple[TP, int]] = []
    assigned = [TP("transactions", p) for p in range(8)] + [TP("actions", p) for p in range(8)]
    committed = {tp: SimpleNamespace(offset=10 * i - 1) for i, tp in enumerate(assigned)}

    async def fetch_committed_offsets(partitions: list[TP]) -> dict[TP, SimpleNamespace]:
        asked.append(list(partitions))
        return {tp: committed[tp] for tp in partitions if tp != assigned[-1]}

    kafka = SimpleNamespace(
        assignment=lambda: set(assigned),
        _coordinator=SimpleNamespace(fetch_committed_offsets=fetch_committed_offsets),
        _fetcher=SimpleNamespace(seek_to=lambda tp, offset: seeks.append((tp, offset))),
        _subscription=SimpleNamespace(subscription=SimpleNamespace(
            assignment=SimpleNamespace(state_value=lambda tp: "state"))))
    consumer._thread._ensure_consumer = lambda: kafka

    async def call_thread(fun, *args):  # noqa: ANN001, ANN202 - awaits as the thread does
        return await fun(*args)

    consumer._thread.call_thread = call_thread
    found = await consumer.seek_to_committed()
    assert len(asked) == 1 and sorted(asked[0]) == sorted(assigned)
    # -1 (never committed) and a partition the coordinator left out read as None
    assert found[assigned[0]] is None and found[assigned[-1]] is None
    assert found[assigned[3]] == 29
    assert sorted(seeks) == sorted((tp, 10 * i - 1) for i, tp in enumerate(assigned)
                                   if 0 < 10 * i - 1 and tp != assigned[-1])
    # recorded with the seek, on the thread: the fetch loop may take the first records from
    # these positions before Faust's perform_seek records them (a partition with no committed
    # offset known was read again from the log start)
    assert consumer._committed_offset[assigned[3]] == 29 and consumer._read_offset[
        assigned[3]] == 29
    assert consumer._committed_offset.get(assigned[0]) is None
    assert consumer._read_offset[assigned[0]] is None
    # each seek noted on the thread: a fetch it overlapped reads from its target
    assert consumer._thread.sought[assigned[3]][1:] == (29, "state")
    assert assigned[0] not in consumer._thread.sought


async def test_a_seek_to_a_commit_marker_is_not_waited_for_ever() -> None:
    """After a worker is killed mid-transaction, its aborted actions and their marker follow
    the dispatcher's commit: a rewind to that offset fetches the next committed record, which
    is not a fetch from before the seek, or the partition would be re-sought for ever (the
    worker-dies-exactly_once scenario)."""
    consumer = eos_consumer(10)
    consumer.assignment = lambda: {ACT, A}
    consumer._thread.call_thread = call_now
    consumer._thread.seek = lambda tp, offset: None
    assert await consumer.rewind(ACT, 10, "gap") is True
    consumer._fill_gaps(fetched(ACT, [15], 10, 16))  # 10..13 aborted, 14 their marker
    assert consumer.passed(ACT, 10) == 15
    assert not consumer._stale(ACT, 15)  # the target's next record ends the seek's filter
