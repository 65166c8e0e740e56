"""The partition sequencer: events reach the agent in offset order per partition, never past a gap."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from app.stream.sequencer import PartitionSequencer

A, B = TP("transactions", 0), TP("transactions", 1)


class FakeConsumer:
    def __init__(self, committed: dict[TP, int], assigned: set[TP]) -> None:
        self._committed_offset = dict(committed)
        self._unacked_messages: set[Any] = set()
        self.assigned = assigned
        self.seeks: list[tuple[TP, int]] = []

    def assignment(self) -> set[TP]:
        return self.assigned

    async def earliest_offsets(self, *tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 3)

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))


class Msg:
    """A consumed message (hashable by identity, as Faust's are)."""

    def __init__(self, tp: TP, offset: int) -> None:
        self.tp, self.offset = tp, offset


def ev(tp: TP, offset: int, consumer: FakeConsumer | None = None) -> Any:
    message = Msg(tp, offset)
    if consumer is not None:
        consumer._unacked_messages.add(message)
    return SimpleNamespace(message=message)


def offsets(events: list[Any]) -> list[tuple[int, int]]:
    return [(e.message.tp.partition, e.message.offset) for e in events]


def setup(committed: dict[TP, int], assigned: set[TP] | None = None
          ) -> tuple[PartitionSequencer, FakeConsumer, SimpleNamespace]:
    consumer = FakeConsumer(committed, assigned or {A, B})
    app = SimpleNamespace(consumer=consumer, consumer_generation_id=1)
    now = [0.0]
    return PartitionSequencer(app, reseek_after_s=5.0, clock=lambda: now[0]), consumer, app


def admit(seq: PartitionSequencer, events: list[Any]) -> list[tuple[int, int]]:
    return offsets(asyncio.run(seq.admit(events)))


def test_in_order_events_pass_from_the_committed_offset() -> None:
    seq, consumer, _ = setup({A: 10, B: 0})
    assert admit(seq, [ev(A, 10), ev(B, 0), ev(A, 11)]) == [(0, 10), (1, 0), (0, 11)]
    assert admit(seq, [ev(A, 12)]) == [(0, 12)]
    assert consumer.seeks == []


def test_a_gap_holds_its_partition_back_and_seeks_to_the_missing_offset() -> None:
    seq, consumer, _ = setup({A: 10, B: 0})
    # 11 never reached the agent: 12 and 13 must wait for it; partition B flows on
    assert admit(seq, [ev(A, 10), ev(A, 12), ev(B, 0), ev(A, 13), ev(B, 1)]) == \
        [(0, 10), (1, 0), (1, 1)]
    assert consumer.seeks == [(A, 11)]
    assert admit(seq, [ev(A, 14)]) == []  # the rest of the old fetch drains, no second seek
    assert consumer.seeks == [(A, 11)]
    assert admit(seq, [ev(A, 11), ev(A, 12), ev(A, 13)]) == [(0, 11), (0, 12), (0, 13)]


def test_a_reread_behind_the_expected_offset_is_admitted() -> None:
    seq, _, _ = setup({A: 10})
    admit(seq, [ev(A, 10), ev(A, 11)])
    assert admit(seq, [ev(A, 10), ev(A, 11), ev(A, 12)]) == [(0, 10), (0, 11), (0, 12)]


def test_revoked_partitions_are_not_processed() -> None:
    seq, _, _ = setup({A: 0, B: 0}, assigned={A})
    assert admit(seq, [ev(B, 0), ev(A, 0)]) == [(0, 0)]


def test_a_rebalance_restarts_from_the_commits() -> None:
    seq, consumer, app = setup({A: 10})
    admit(seq, [ev(A, 10), ev(A, 11), ev(A, 12)])
    consumer._committed_offset[A] = 11  # the last commit before the rebalance
    app.consumer_generation_id = 2
    assert admit(seq, [ev(A, 13)]) == []
    assert consumer.seeks == [(A, 11)]


def test_no_commit_yet_starts_at_the_log_start() -> None:
    seq, consumer, _ = setup({})
    assert admit(seq, [ev(A, 4)]) == []
    assert consumer.seeks == [(A, 3)]
    assert admit(seq, [ev(A, 3), ev(A, 4)]) == [(0, 3), (0, 4)]


def test_a_partition_still_held_is_sought_again_by_the_timer() -> None:
    consumer = FakeConsumer({A: 10}, {A, B})
    app = SimpleNamespace(consumer=consumer, consumer_generation_id=1)
    now = [0.0]
    seq = PartitionSequencer(app, reseek_after_s=3.0, clock=lambda: now[0])
    assert admit(seq, [ev(A, 12)]) == []
    now[0] = 2.0
    assert asyncio.run(seq.check()) == 0  # not yet
    now[0] = 3.5  # the re-read never came (the first seek was overtaken by an older fetch)
    assert asyncio.run(seq.check()) == 1
    assert consumer.seeks == [(A, 10), (A, 10)]
    assert admit(seq, [ev(A, 10)]) == [(0, 10)]
    now[0] = 10.0
    assert asyncio.run(seq.check()) == 0  # no longer held


def test_held_events_are_released_unacked_so_a_rebalance_does_not_wait_for_them() -> None:
    seq, consumer, _ = setup({A: 10})
    kept, gap = ev(A, 10, consumer), ev(A, 12, consumer)
    asyncio.run(seq.admit([kept, gap]))
    assert gap.message not in consumer._unacked_messages  # Faust's wait_empty would hang
    assert kept.message in consumer._unacked_messages  # processed: acked by the agent later
