"""Fetch pacing: a copy of the active partitions, full queues left out, no nap while nothing
is read, records of paused partitions handed back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from faust.types import TP
from stream_support import ACT, A, B, call_now, eos_consumer, fetched, message, real_consumer

from app.stream.kafka.chunks import Chunk
from app.stream.kafka.fetching import (
    BLOCKED_TOPIC_POLL_S,
    MAX_POLL_RECORDS,
)


async def test_the_thread_fetches_for_a_copy_of_the_active_partitions() -> None:
    consumer, _ = real_consumer({})
    seen = []

    async def getmany(active, _timeout):
        seen.append(active)
        active.clear()  # what a rebalance does to the live set meanwhile
        return {}

    consumer._thread.getmany = getmany
    live = {A, B}
    await consumer._getmany(live, 1.0)
    assert live == {A, B}
    assert await consumer._getmany(set(), 1.0) == {}
    assert len(seen) == 1  # an empty set fetches nothing instead of everything


async def test_each_chunk_topic_has_its_own_queue_and_a_full_one_is_not_fetched() -> None:
    """A full queue (its loop not taking: the action service down, say) leaves its topic in
    Kafka; the other topic is still fetched and its loop still served."""
    consumer, _ = real_consumer({A: 0, B: 0})
    consumer.chunk_topics = frozenset({"transactions", "actions"})
    act = TP("actions", 0)
    await consumer._deliver_chunk(1, {act: [message(act, 0)]})
    await consumer._deliver_chunk(1, {A: [message(A, 0)]})
    assert consumer.chunk_queue("actions").qsize() == consumer.chunk_queue("transactions").qsize() == 1
    fetched: list[tuple[set[TP], float]] = []

    async def getmany(active, wait_s):
        fetched.append((set(active), wait_s))
        return {}

    consumer._thread.getmany = getmany
    await consumer._getmany({A, act}, 1.0)
    actions = consumer.chunk_queue("actions")
    while not actions.full():
        actions.put_nowait(Chunk(1, [message(act, 1)]))
    await consumer._getmany({A, act}, 1.0)
    # the other topic is read only briefly: a wait for it (the group leader's topic gets no
    # record at all) held the full topic's next fetch a second after its loop made room
    assert fetched == [({A, act}, 1.0), ({A}, BLOCKED_TOPIC_POLL_S)]
    # aiokafka is still told Faust reads the full topic: what it fetched for it is kept
    assert consumer._thread.wanted == {A, act}
    # only the full topic is active: no fetch, a wait that ends when its loop takes a chunk
    waiting = asyncio.ensure_future(consumer._getmany({act}, 5.0))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    actions.get_nowait()
    assert await asyncio.wait_for(waiting, 1.0) == {}
    assert len(fetched) == 2


async def _yield_to_loop(times: int = 5) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def test_the_first_fetch_after_a_restore_does_not_wait_out_a_second() -> None:
    """From an assignment until its tables are restored Faust reads no partition, and its
    fetch loop slept 1 s at a time: the first events after a rebalance waited for it."""
    consumer, _ = real_consumer({A: 0, B: 0})
    fetched: list[set[TP]] = []
    naps: list[float] = []

    async def getmany(active, _timeout):
        fetched.append(set(active))
        return {}

    async def nap(seconds: float) -> None:  # Faust's fixed sleep when it reads nothing
        naps.append(seconds)

    consumer._thread.getmany = getmany
    consumer.sleep = nap
    consumer.pause_partitions({A, B})
    assert await consumer._wait_next_records(0.05) == ({}, set())  # nothing read: no fetch
    assert fetched == []
    waiting = asyncio.ensure_future(consumer._wait_next_records(5.0))
    await _yield_to_loop()
    assert not waiting.done()  # waits for a partition to read, no nap
    consumer.resume_partitions({A})
    await asyncio.wait_for(waiting, 1.0)
    assert fetched == [{A}]
    # a rebalance: Faust stops the flow and pauses everything, then resumes the flow first
    consumer.stop_flow()
    consumer.pause_partitions({A, B})
    waiting = asyncio.ensure_future(consumer._wait_next_records(5.0))
    await _yield_to_loop()
    consumer.resume_flow()
    await _yield_to_loop()
    assert not waiting.done()
    consumer.resume_partitions({B})
    await asyncio.wait_for(waiting, 1.0)
    assert fetched == [{A}, {B}]
    assert naps == []


async def test_records_handed_back_for_a_paused_partition_are_never_counted_done() -> None:
    """Records fetched for a partition paused meanwhile are taken out of the fetch and read
    again. The offsets the fetch position passed were counted as done, less the records left
    in the fetch: the handed-back ones too, so a commit could pass them unprocessed."""
    consumer = eos_consumer(10)
    consumer._thread.call_thread = call_now
    sought: list[tuple[TP, int]] = []
    consumer._thread.seek = lambda tp, offset: sought.append((tp, offset))

    async def getmany(active, _timeout):
        consumer.pause_partitions({ACT})  # paused while the fetch was in flight
        return fetched(ACT, [11, 12, 14], 10, 16)

    consumer._thread.getmany = getmany
    consumer._active_partitions = {ACT}
    records, _active = await consumer._wait_next_records(0.05)
    assert ACT not in records and sought == [(ACT, 11)]  # handed back, read again from 11
    assert sorted(consumer._acked[ACT]) == [10, 13, 15]  # only the markers are done
    assert consumer._new_offset(ACT) == 11


async def test_a_fetch_of_markers_only_counts_them_done() -> None:
    """The trailing marker of a partition's last transaction is often fetched alone: the fetch
    hands out no record (an empty mapping) and its gaps must count all the same."""
    consumer = eos_consumer(10)

    async def getmany(active, _timeout):
        return fetched(ACT, [], 10, 12)

    consumer._thread.getmany = getmany
    consumer._active_partitions = {ACT}
    records, _active = await consumer._wait_next_records(0.05)
    assert not records and sorted(consumer._acked[ACT]) == [10, 11]
    assert consumer._new_offset(ACT) == 12


async def test_one_fetch_call_hands_over_a_bounded_chunk(tmp_path: Path) -> None:
    """A chunk is one fetch call's records and the queue holds four: with Faust's default (no
    limit) a worker behind its input took 1 MiB of every partition per call, and an overload
    left ~95k read messages queued inside it (16k ev/s for 45 s)."""
    from app.settings import Settings
    from app.stream.app import create_app

    app = create_app(Settings().replace(state_dir=tmp_path), web_port=1,
                     agents=frozenset({"dispatch"})).app
    kafka = app.consumer._thread._create_worker_consumer(app.transport)
    try:
        assert kafka._max_poll_records == MAX_POLL_RECORDS <= 4 * 1024
    finally:
        await kafka.stop()
