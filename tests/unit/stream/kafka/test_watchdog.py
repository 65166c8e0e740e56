"""The commit watchdog re-reads a partition whose commit is stuck, through the consumer's rewind."""

from __future__ import annotations

from stream_support import A, real_consumer

from app.stream.kafka.watchdog import CommitWatchdog


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


async def test_rereads_a_partition_fetched_past_its_commit_while_its_agent_holds_nothing() -> None:
    # seen in CI: `actions` partitions taken over from a dead worker, fetched 36-55 messages
    # past their commits, never handed over (no read offset), nothing acknowledged
    consumer, broker = real_consumer({A: 23})
    positions = {A: 78}  # aiokafka's fetch position
    consumer.fetch_positions = lambda: positions
    assert consumer._read_offset.get(A) is None
    idle = {"transactions": False}
    dog = CommitWatchdog(["transactions"], stall_s=10, idle=lambda topic: idle[topic])
    assert await dog.check(consumer, now=0.0) == 0
    assert await dog.check(consumer, now=20.0) == 0  # the agent is busy with it: not stuck
    idle["transactions"] = True
    assert await dog.check(consumer, now=21.0) == 0
    assert await dog.check(consumer, now=30.0) == 0
    assert await dog.check(consumer, now=31.5) == 1
    assert broker.seeks == [(A, 23)]
    positions[A] = 23  # what the seek does
    assert await dog.check(consumer, now=50.0) == 0


async def test_a_partition_fetched_up_to_its_commit_a_moving_commit_or_a_rebalance_is_not_stuck(
) -> None:
    consumer, broker = real_consumer({A: 68})
    positions = {A: 68}  # everything fetched is committed
    consumer.fetch_positions = lambda: positions
    dog = CommitWatchdog(["transactions"], stall_s=10, idle=lambda topic: True)
    assert await dog.check(consumer, now=0.0) == 0
    assert await dog.check(consumer, now=50.0) == 0
    positions[A] = 90
    assert await dog.check(consumer, now=51.0) == 0
    consumer._committed_offset[A] = 80  # progress: the stall starts again
    assert await dog.check(consumer, now=60.0) == 0
    consumer.flow_active = False  # a rebalance: the stall does not count
    assert await dog.check(consumer, now=75.0) == 0
    consumer.flow_active = True
    assert await dog.check(consumer, now=76.0) == 0  # the stall starts again here
    assert await dog.check(consumer, now=85.0) == 0
    assert await dog.check(consumer, now=86.5) == 1
    assert broker.seeks == [(A, 80)]
    assert await CommitWatchdog(["transactions"], stall_s=0).check(consumer, now=100) == 0
