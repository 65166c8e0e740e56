"""Strict commits: never past an unprocessed offset, acks kept until done, commit markers done."""

from __future__ import annotations

import pytest
from faust.types import TP
from stream_support import ACT, A, acked, eos_consumer, fetched, real_consumer


def test_never_commits_past_an_unacked_head_message() -> None:
    consumer, _ = real_consumer({A: 100})
    acked(consumer, A, [101, 102, 103])
    # Faust's own computation (the base class) commits 104: offset 100 would be lost
    assert consumer._new_offset(A) is None
    assert consumer._acked[A] == [101, 102, 103]  # nothing dropped


def test_commits_the_consecutive_run_from_the_committed_offset() -> None:
    consumer, _ = real_consumer({A: 100})
    acked(consumer, A, [102, 100, 101, 105])
    assert consumer._new_offset(A) == 103
    assert consumer._acked[A] == [100, 101, 102, 105]  # kept until the commit is done


async def test_acks_are_dropped_only_once_their_commit_is_done() -> None:
    """A commit that fails (the broker restarting) keeps the acks for the next one: Faust
    drops them before it commits, and the partition's commit then stalls behind offsets that
    no longer count as acknowledged (the watchdog re-read them 10 s later)."""
    consumer, _ = real_consumer({A: 100})
    consumer.app.topics.acks_enabled_for = lambda topic: True
    committed: list[dict] = []
    fail = [True]

    async def commit_on_thread(offsets: dict[TP, int]) -> bool:
        if fail[0]:
            raise ConnectionError("broker restarting")
        committed.append(dict(offsets))
        return True

    async def flush() -> None:
        return None

    consumer._thread.commit = commit_on_thread
    consumer.app.producer.flush = flush
    acked(consumer, A, [100, 101, 102])
    with pytest.raises(ConnectionError):
        await consumer.commit()
    assert consumer._committed_offset[A] == 100 and consumer._acked[A] == [100, 101, 102]
    fail[0] = False
    assert await consumer.commit() is True
    assert committed == [{A: 103}] and consumer._committed_offset[A] == 103
    assert consumer._acked[A] == [] and not consumer._acked_index[A]


def test_no_commit_while_the_partition_start_is_unknown() -> None:
    consumer, _ = real_consumer({A: None})
    acked(consumer, A, [3, 4, 5])
    assert consumer._new_offset(A) is None


async def test_a_fetch_gap_is_never_counted_as_done() -> None:
    consumer, _ = real_consumer({A: 100})
    await consumer._add_gap(A, 101, 103)
    acked(consumer, A, [100, 103])
    assert consumer._new_offset(A) == 101  # 101 and 102 were never processed


def test_commit_markers_between_and_after_fetched_records_count_as_done() -> None:
    consumer = eos_consumer(10)
    assert consumer.gapped_topics == {"actions"}
    # the fetch starts at the commit (here a marker) and passes one more after its last record
    consumer._fill_gaps(fetched(ACT, [11, 12, 14], 10, 16))
    assert sorted(consumer._acked[ACT]) == [10, 13, 15]
    assert consumer._new_offset(ACT) == 11  # 11 itself is not processed yet
    acked(consumer, ACT, [*consumer._acked[ACT], 11, 12, 14])
    assert consumer._new_offset(ACT) == 16  # past the trailing marker: lag can reach 0
    # the offset-order check and seek targets pass known markers, and the committed offset
    assert consumer.passed(ACT, 13) == 14 and consumer.passed(ACT, 12) == 12
    consumer._committed_offset[ACT] = 16
    assert consumer.passed(ACT, 13) == 16


def test_at_least_once_has_no_gapped_topic() -> None:
    consumer, _ = real_consumer({A: 0})
    assert consumer.gapped_topics == frozenset() and consumer.passed(A, 5) == 5


async def test_transactional_input_offsets_are_recorded_not_committed_again() -> None:
    consumer = eos_consumer(0)
    # no broker: a commit of its own would fail here, the transaction committed these already
    assert await consumer._commit_offsets({A: 42}) is True
    assert consumer._committed_offset[A] == 42


def test_the_commit_watchdog_sees_no_stall_in_markers_acked_ahead_of_work() -> None:
    from app.stream.kafka.watchdog import CommitWatchdog

    consumer = eos_consumer(10)
    consumer._fill_gaps(fetched(ACT, [10, 11], 10, 13))  # 12: a marker
    watchdog = CommitWatchdog(["actions"], stall_s=1.0)
    assert consumer._acked[ACT] == [12] and watchdog.stuck(consumer) == []
    acked(consumer, ACT, [12, 11])  # 11 done, 10 still in work: a real stall if it lasts
    consumer._gaps[ACT] = {12}
    assert watchdog.stuck(consumer) == [(ACT, 10)]
