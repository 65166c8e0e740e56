"""The commit watchdog re-reads a partition whose commit is stuck, through the consumer's rewind."""

from __future__ import annotations

from stream_support import A, real_consumer

from app.stream.watchdog import CommitWatchdog


async def test_rereads_a_partition_stuck_longer_than_the_stall() -> None:
    consumer, broker = real_consumer({A: 5176})
    consumer._acked[A] = [5178, 5179]
    dog = CommitWatchdog(["transactions"], stall_s=10)
    assert await dog.check(consumer, now=0.0) == 0
    assert await dog.check(consumer, now=9.0) == 0
    assert await dog.check(consumer, now=10.5) == 1
    assert broker.seeks == [(A, 5176)]


async def test_leaves_healthy_and_unwatched_partitions_alone() -> None:
    healthy, broker = real_consumer({A: 10})
    healthy._acked[A] = [10, 11]
    assert await CommitWatchdog(["transactions"], stall_s=0).check(healthy, now=100) == 0
    stuck, other = real_consumer({A: 10}, app_id="unit2")
    stuck._acked[A] = [15]
    assert await CommitWatchdog(["actions"], stall_s=0).check(stuck, now=100) == 0
    assert broker.seeks == other.seeks == []


async def test_fills_in_the_log_start_of_a_partition_never_committed() -> None:
    consumer, broker = real_consumer({A: None})
    consumer._acked[A] = [3, 4, 5]
    broker.log_start = 0
    dog = CommitWatchdog(["transactions"], stall_s=10)
    assert await dog.check(consumer, now=0.0) == 0
    assert consumer._committed_offset[A] == 0
    assert await dog.check(consumer, now=11.0) == 1  # 0..2 were never processed: re-read
    assert broker.seeks == [(A, 0)]
