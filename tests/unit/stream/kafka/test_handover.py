"""Hand-over: chunks as Faust's messages, queued and tracked, stale records skipped, one lock
per batch ack."""

from __future__ import annotations

import asyncio

from aiokafka.structs import ConsumerRecord
from faust.types import TP
from stream_support import A, B, message, real_consumer

from app.stream.kafka.chunks import Chunk, chunk_messages


def test_chunk_messages_are_what_faust_makes_of_each_record() -> None:
    consumer, _ = real_consumer({A: 10})
    consumer.app.consumer_generation_id = 7
    records = [ConsumerRecord(A.topic, A.partition, 10 + i, ts, 1, b"k%d" % i, b"v", None, 2, 1,
                              [("h", b"x")]) for i, ts in enumerate([1_790_000_000_123, None])]
    made = chunk_messages(A, records, 7)
    slots = [s for s in type(made[0]).__slots__ if s != "__weakref__"]
    for ours, faust_made in zip(made, [consumer._to_message(A, r) for r in records], strict=True):
        assert {s: getattr(ours, s, None) for s in slots} == {
            s: getattr(faust_made, s, None) for s in slots}
    assert made[0].timestamp == 1_790_000_000.123 and made[1].timestamp is None


async def test_only_a_pending_seek_or_a_re_read_makes_a_fetch_possibly_stale() -> None:
    consumer, _ = real_consumer({A: 10})
    assert not consumer._may_be_stale(A, 10)  # nothing read yet
    consumer._read_offset[A] = 40
    assert consumer._may_be_stale(A, 39) and not consumer._may_be_stale(A, 40)
    for first in (39, 40):  # the fast path is taken only where no record is stale
        assert consumer._may_be_stale(A, first) or not any(
            consumer._stale(A, offset) for offset in range(first, first + 5))
    assert await consumer.rewind(A, 41, "gap") is True
    assert consumer._may_be_stale(A, 45)  # a seek pending: every record is checked
    assert consumer._stale(A, 45)


async def test_a_delivered_chunk_is_tracked_and_moves_the_read_offsets() -> None:
    consumer, _ = real_consumer({A: 0, B: 0})
    by_tp = {A: [message(A, 0), message(A, 1)], B: [message(B, 5)]}
    await consumer._deliver_chunk(1, by_tp)
    chunk = consumer.chunk_queue("transactions").get_nowait()
    assert chunk == Chunk(1, [*by_tp[A], *by_tp[B]])
    assert all(m in consumer._unacked_messages for m in chunk.messages)
    assert (consumer._read_offset[A], consumer._read_offset[B]) == (1, 5)


async def test_an_interrupted_chunk_is_released_and_its_partitions_rewound() -> None:
    consumer, broker = real_consumer({A: 0, B: 0})
    for i in range(consumer.chunk_queue("transactions").maxsize):  # the engine is not taking chunks
        consumer.chunk_queue("transactions").put_nowait(Chunk(1, [message(B, i)]))
    by_tp = {A: [message(A, 7), message(A, 8)]}
    delivery = asyncio.ensure_future(consumer._deliver_chunk(1, by_tp))
    await asyncio.sleep(0.01)
    consumer.suspend_flow.set()  # a rebalance starts
    await asyncio.wait_for(delivery, 2)
    assert broker.seeks == [(A, 7)]
    assert not any(m in consumer._unacked_messages for m in by_tp[A])
    assert consumer._read_offset[A] == 7  # the read offset points at the re-read


def test_stopping_the_flow_drops_queued_chunks_unacked() -> None:
    consumer, _ = real_consumer({A: 0})
    queued = [message(A, 0), message(A, 1)]
    for m in queued:
        consumer.track_message(m)
    consumer.chunk_queue("transactions").put_nowait(Chunk(1, queued))
    consumer.stop_flow()
    assert consumer.chunk_queue("transactions").empty()
    assert not consumer._unacked_messages  # a rebalance's wait_empty does not wait for them


def test_a_batch_ack_keeps_the_same_books_as_one_ack_per_message() -> None:
    def batch() -> list:
        other = TP("other", 0)
        # 98 is below the commit, 101 comes twice, `other` takes no acks
        return [message(A, 100), message(A, 101), message(A, 101), message(A, 98),
                message(B, 7), message(other, 3)]

    books = []
    for one_by_one in (True, False):
        consumer, _ = real_consumer({A: 100, B: None})
        consumer.app.topics.acks_enabled_for = lambda topic: topic == "transactions"
        messages = batch()
        for m in messages:
            consumer._unacked_messages.add(m)
        if one_by_one:
            taken = sum(consumer.ack(m) for m in messages)
        else:
            taken = consumer.ack_many(messages)
        books.append((taken, dict(consumer._acked), dict(consumer._acked_index),
                      consumer._n_acked, sorted((m.tp, m.offset) for m in consumer._unacked_messages),
                      [m.acked for m in messages]))
    assert books[0] == books[1]
    assert books[1][0] == 3  # A:100, A:101, B:7


def test_a_fetch_is_split_into_chunk_topics_and_the_rest_for_active_partitions_only() -> None:
    consumer, _ = real_consumer({A: 0, B: 0})
    ends: dict[TP, int] = {}
    consumer.highwater = lambda tp: 50 + tp.partition
    consumer.app.monitor.track_tp_end_offset = ends.__setitem__
    other = TP("actions", 0)
    records = {A: ["a0", "a1"], B: ["b0"], other: ["x0"], TP("transactions", 2): []}
    chunked, single = consumer._split(records, {A, other})
    assert (chunked, single) == ({A: ["a0", "a1"]}, {other: ["x0"]})  # B is paused
    assert ends == {A: 50, other: 50}
