"""The partition sequencer: messages reach the engine in offset order per partition, never past a gap."""

from __future__ import annotations

from typing import Any

from faust.types import TP, Message
from stream_support import A, B, message, real_consumer

from app.stream.kafka.sequencer import PartitionSequencer


def setup(committed: dict[TP, int | None], assigned: set[TP] | None = None,
          reseek_after_s: float = 5.0) -> tuple[PartitionSequencer, Any, Any, list[float]]:
    consumer, broker = real_consumer(committed, assigned)
    now = [0.0]
    seq = PartitionSequencer(consumer.app, reseek_after_s=reseek_after_s, clock=lambda: now[0])
    return seq, consumer, broker, now


def msgs(*pairs: tuple[TP, int], consumer: Any = None) -> list[Message]:
    out = [message(tp, offset) for tp, offset in pairs]
    for m in out if consumer is not None else ():
        consumer.track_message(m)
    return out


async def admit(seq: PartitionSequencer, messages: list[Message]) -> list[tuple[int, int]]:
    return [(m.partition, m.offset) for m in await seq.admit(messages)]


async def test_in_order_messages_pass_from_the_committed_offset() -> None:
    seq, _, broker, _ = setup({A: 10, B: 0})
    assert await admit(seq, msgs((A, 10), (B, 0), (A, 11))) == [(0, 10), (1, 0), (0, 11)]
    assert await admit(seq, msgs((A, 12))) == [(0, 12)]
    assert broker.seeks == []


async def test_a_gap_holds_its_partition_back_and_rewinds_to_the_missing_offset() -> None:
    seq, _, broker, _ = setup({A: 10, B: 0})
    # 11 never reached the engine: 12 and 13 must wait for it; partition B flows on
    assert await admit(seq, msgs((A, 10), (A, 12), (B, 0), (A, 13), (B, 1))) == \
        [(0, 10), (1, 0), (1, 1)]
    assert broker.seeks == [(A, 11)]
    assert await admit(seq, msgs((A, 14))) == []  # the rest of the old fetch, no second rewind
    assert broker.seeks == [(A, 11)]
    assert await admit(seq, msgs((A, 11), (A, 12), (A, 13))) == [(0, 11), (0, 12), (0, 13)]
    assert await admit(seq, msgs((A, 14))) == [(0, 14)]


async def test_a_reread_of_what_this_generation_processed_is_dropped_unacked() -> None:
    seq, consumer, _, _ = setup({A: 10})
    await admit(seq, msgs((A, 10), (A, 11)))
    again = msgs((A, 10), (A, 11), (A, 12), consumer=consumer)
    assert await admit(seq, again) == [(0, 12)]
    assert again[0] not in consumer._unacked_messages  # its first copy's ack commits it
    consumer.app.consumer_generation_id = 2  # after a rebalance everything counts again
    assert await admit(seq, msgs((A, 10))) == [(0, 10)]


async def test_revoked_partitions_are_not_processed() -> None:
    seq, _, _, _ = setup({A: 0, B: 0}, assigned={A})
    assert await admit(seq, msgs((B, 0), (A, 0))) == [(0, 0)]


async def test_a_rebalance_restarts_from_the_commits() -> None:
    seq, consumer, broker, _ = setup({A: 10})
    await admit(seq, msgs((A, 10), (A, 11), (A, 12)))
    consumer._committed_offset[A] = 11  # the last commit before the rebalance
    consumer.app.consumer_generation_id = 2
    assert await admit(seq, msgs((A, 13))) == []
    assert broker.seeks == [(A, 11)]


async def test_no_commit_yet_starts_at_the_log_start() -> None:
    seq, _, broker, _ = setup({})
    assert await admit(seq, msgs((A, 4))) == []
    assert broker.seeks == [(A, 3)]
    assert await admit(seq, msgs((A, 3), (A, 4))) == [(0, 3), (0, 4)]


async def test_a_partition_still_held_is_rewound_again_by_the_timer() -> None:
    seq, _, broker, now = setup({A: 10}, reseek_after_s=3.0)
    assert await admit(seq, msgs((A, 12))) == []
    now[0] = 2.0
    assert await seq.check() == 0  # not yet
    now[0] = 3.5  # the re-read never came (the first rewind was overtaken by an older fetch)
    assert await seq.check() == 1
    assert broker.seeks == [(A, 10), (A, 10)]
    assert await admit(seq, msgs((A, 10))) == [(0, 10)]
    now[0] = 10.0
    assert await seq.check() == 0  # no longer held


async def test_held_messages_are_released_unacked_so_a_rebalance_does_not_wait_for_them() -> None:
    seq, consumer, _, _ = setup({A: 10})
    kept, gap = msgs((A, 10), (A, 12), consumer=consumer)
    await seq.admit([kept, gap])
    assert gap not in consumer._unacked_messages  # Faust's wait_empty would hang
    assert kept in consumer._unacked_messages  # processed: acked by the checkpoint later
