"""The consumer thread: fetches only what Faust reads, parks briefly, tells the offsets a fetch
passed."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from faust.types import TP
from stream_support import ACT, eos_consumer, fetched, real_consumer

from app.stream.kafka.fetching import (
    BUSY_FETCH_MAX_WAIT_MS,
    BUSY_FETCH_MIN_BYTES_PER_PARTITION,
)
from app.stream.kafka.thread import IDLE_FETCH_MAX_WAIT_MS, fetch_only, skipped_offsets


async def test_aiokafka_fetches_only_the_partitions_faust_reads() -> None:
    """Faust pauses a partition (a table's changelog once restored) in its own books only;
    aiokafka went on fetching it, nobody took the result, and while an untaken result was
    younger than its prefetch backoff aiokafka sent that broker no fetch at all."""
    kafka = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
    log, changelog = TopicPartition("transactions", 0), TopicPartition("card-changelog", 0)
    kafka.assign([log, changelog])
    kafka._fetcher = SimpleNamespace(_records={log: "fetched", changelog: "fetched"})
    try:
        fetch_only(kafka, frozenset({TP("transactions", 0)}))  # Faust's own TP type
        assert kafka.paused() == {changelog}
        assert kafka._fetcher._records == {log: "fetched"}  # its position stays: re-fetched
        fetch_only(kafka, frozenset({TP("transactions", 0), TP("card-changelog", 0)}))
        assert kafka.paused() == set()
        kafka._fetcher._records[changelog] = "fetched"
        fetch_only(kafka, frozenset({TP("transactions", 0), TP("card-changelog", 0)}))
        assert set(kafka._fetcher._records) == {log, changelog}  # nothing paused: kept
        # a fetch in flight when the partition was paused stores its result all the same
        fetch_only(kafka, frozenset({TP("transactions", 0)}))
        kafka._fetcher._records[changelog] = "fetched late"
        fetch_only(kafka, frozenset({TP("transactions", 0)}))
        assert kafka._fetcher._records == {log: "fetched"}
        # the consumer thread applies it before each fetch, with what the app's loop wants
        consumer, _ = real_consumer({})
        consumer._thread.wanted = frozenset({TP("transactions", 0)})
        consumer.stop_flow()  # Faust's fetch then returns at once
        assert await consumer._thread._fetch_records(kafka, {TP("transactions", 0)}) == {}
        assert kafka.paused() == {changelog}
    finally:
        kafka._fetcher = None
        await kafka.stop()


def test_a_fetch_a_seek_overlapped_counts_from_the_seek_target() -> None:
    """A seek while the fetch waited moved the position: what the fetch read of that
    partition starts at the target (18 here), not where it stood before (10..17 are not known
    to be markers; 18, 19, 21 and 23 are)."""
    state, other = object(), object()
    records = {ACT: [SimpleNamespace(offset=o) for o in (20, 22)]}
    assert skipped_offsets({ACT: (state, 10)}, {ACT: (state, 24)}, records,
                           {ACT: (18, state)}) == {ACT: [18, 19, 21, 23]}
    # sought, then nothing read: nothing passed; a seek of another partition changes nothing
    assert skipped_offsets({ACT: (state, 10)}, {ACT: (state, 18)}, {}, {ACT: (18, state)}) == {}
    assert skipped_offsets({ACT: (state, 10)}, {ACT: (state, 12)}, {},
                           {TP("actions", 1): (0, other)}) == {ACT: [10, 11]}
    # reassigned meanwhile (a new state object, the seek was of the old one), or moved back (a
    # reset): only what its records span is known; with no record, nothing
    for before, seek in (({ACT: (state, 10)}, {}), ({ACT: (state, 10)}, {ACT: (18, state)})):
        assert skipped_offsets(before, {ACT: (other, 24)}, records, seek) == {ACT: [21, 23]}
    assert skipped_offsets({ACT: (state, 30)}, {ACT: (state, 24)}, records, {}) == {
        ACT: [21, 23]}
    assert skipped_offsets({ACT: (state, 10)}, {ACT: (other, 24)}, {}, {}) == {}
    assert fetched(ACT, [], 10, 14).gaps == {ACT: [10, 11, 12, 13]}  # markers only


async def test_the_consumer_thread_tells_the_offsets_a_fetch_passed() -> None:
    """On the consumer thread, from the partition's position before and after the fetch, or
    from the target of a seek made on the thread while the fetch waited."""
    consumer = eos_consumer(10)
    thread = consumer._thread
    state = SimpleNamespace(_position=10)
    positions = {TopicPartition("actions", 0): state,
                 TopicPartition("transactions", 0): SimpleNamespace(_position=3)}
    assignment = SimpleNamespace(_tp_state=positions, state_value=lambda tp: positions[tp])
    reads: list[tuple[list[int], int, bool]] = []  # (offsets handed out, end, seek meanwhile)

    def seek(tp, offset):
        positions[tp]._position = offset

    async def fetched_records(partitions, timeout=0, max_records=None):  # noqa: ASYNC109
        offsets, end, sought = reads.pop(0)
        if sought:
            thread.seek(ACT, 18)  # Faust's seek, or a rewind: on the thread, while it waits
        state._position = end
        return {ACT: [SimpleNamespace(offset=o) for o in offsets]} if offsets else {}

    fetcher = SimpleNamespace(_closed=False, fetched_records=fetched_records,
                              _subscriptions=SimpleNamespace(fetch_context=contextlib.nullcontext))
    kafka = SimpleNamespace(_closed=False, _fetcher=fetcher, seek=seek,
                            _subscription=SimpleNamespace(
                                subscription=SimpleNamespace(assignment=assignment)))
    thread._consumer = kafka
    thread.wanted = None
    reads.append(([11, 12], 14, False))
    records = await thread._fetch_records(kafka, {ACT}, timeout=0.1)
    assert records == {ACT: records[ACT]} and records.gaps == {ACT: [10, 13]}
    reads.append(([20, 22], 24, True))
    assert (await thread._fetch_records(kafka, {ACT}, timeout=0.1)).gaps == {
        ACT: [18, 19, 21, 23]}
    reads.append(([], 24, False))  # the seek was of the fetch before: this one starts at 24
    assert (await thread._fetch_records(kafka, {ACT}, timeout=0.1)).gaps == {}


async def test_a_fetch_parks_at_the_broker_no_longer_than_the_idle_wait() -> None:
    """A broker answers one connection's requests in order: Faust's 1.5 s fetch wait held the
    end offsets and metadata a rebalance's recovery asks for behind a fetch of quiet partitions
    (0.3-1.4 s of a rolling restart's hand-over). A busy loop's fetch waits less still."""
    consumer, _ = real_consumer({})
    kafka = consumer._thread._create_worker_consumer(consumer.transport)
    try:
        assert kafka._fetch_max_wait_ms == IDLE_FETCH_MAX_WAIT_MS <= 100
        # the fetcher (made at start) takes it; pacing switches to the busy values and back
        fetcher = SimpleNamespace(_fetch_min_bytes=1, _fetch_max_wait_ms=kafka._fetch_max_wait_ms)
        consumer._thread._consumer = SimpleNamespace(_fetcher=fetcher)
        consumer.pace_fetch(True, 4)
        assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == (
            4 * BUSY_FETCH_MIN_BYTES_PER_PARTITION, BUSY_FETCH_MAX_WAIT_MS)
        consumer.pace_fetch(False, 4)
        assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == (1, IDLE_FETCH_MAX_WAIT_MS)
    finally:
        consumer._thread._consumer = None
        await kafka.stop()
