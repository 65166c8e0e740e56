"""FraudConsumer: strict commits, one rewind, the log start at assignment, chunk hand-over."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition
from faust.types import TP
from stream_support import A, B, message, real_consumer

from app.stream.consumer import (
    BLOCKED_TOPIC_POLL_S,
    BUSY_FETCH_MAX_WAIT_MS,
    BUSY_FETCH_MIN_BYTES_PER_PARTITION,
    IDLE_FETCH_MAX_WAIT_MS,
    MAX_POLL_RECORDS,
    Chunk,
    Fetched,
    FraudConsumer,
    Transport,
    broker_url,
    check_faust_version,
    chunk_messages,
    fetch_only,
    skipped_offsets,
)


def test_the_fraudstream_scheme_selects_the_subclass() -> None:
    consumer, _ = real_consumer({})
    assert type(consumer) is FraudConsumer
    assert Transport.Consumer is FraudConsumer
    assert broker_url("h1:9092, h2:9092") == "fraudstream://h1:9092;h2:9092"


def test_an_untested_faust_version_is_refused_with_the_reason() -> None:
    check_faust_version("0.15.3")
    with pytest.raises(RuntimeError, match="faust-streaming 0.16.1 is not supported"):
        check_faust_version("0.16.1")
    with pytest.raises(RuntimeError, match="not supported"):
        check_faust_version("0.14.9")


def acked(consumer: FraudConsumer, tp: TP, offsets: list[int]) -> None:
    consumer._acked[tp] = list(offsets)
    consumer._acked_index[tp] = set(offsets)


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


async def test_rewind_seeks_on_the_consumer_thread_and_filters_until_the_target() -> None:
    consumer, broker = real_consumer({A: 10})
    consumer._read_offset[A] = 40
    assert await consumer.rewind(A, 41, "gap") is True
    assert broker.seeks == [(A, 41)]
    assert consumer._read_offset[A] == 41
    assert consumer._stale(A, 45)  # fetched before the seek
    assert not consumer._stale(A, 41)  # the target itself arrives: the filter is done
    assert A not in consumer.seek_targets


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


async def test_rewind_of_a_revoked_partition_does_nothing() -> None:
    consumer, broker = real_consumer({A: 10}, assigned={B})
    assert await consumer.rewind(A, 10, "gap") is False
    assert broker.seeks == []


async def test_uncommitted_partitions_start_at_the_log_start_when_assigned() -> None:
    consumer, _ = real_consumer({A: 7, B: None})
    assert await consumer.fill_unknown_commits(frozenset({"transactions"})) == 1
    assert consumer._committed_offset[A] == 7
    assert consumer._committed_offset[B] == 3
    acked(consumer, B, [3, 4])
    assert consumer._new_offset(B) == 5  # commits at once: no re-read at the next rebalance


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


async def test_a_revoke_commits_the_finished_work_before_faust_forgets_it() -> None:
    """Faust drops a revoked partition's acks before its own commit: without this, every
    rebalance (each worker that starts) re-read a commit interval of work on every partition."""
    consumer, _ = real_consumer({A: 10, B: 0})
    order: list[str] = []

    async def commit_on_thread(offsets: dict[TP, int]) -> bool:
        order.append(f"commit {sorted((tp.partition, o) for tp, o in offsets.items())}")
        return True

    async def settle() -> None:
        order.append("settle")

    async def faust_revoke(revoked: set[TP]) -> None:
        order.append("faust")

    consumer._thread.commit = commit_on_thread
    consumer.settlers = [settle]
    consumer._on_partitions_revoked = faust_revoke
    acked(consumer, A, [10, 11, 12])
    await consumer.on_partitions_revoked({A, B})
    assert order == ["settle", "commit [(0, 13)]", "faust"]
    assert A not in consumer._acked  # Faust's own bookkeeping is dropped afterwards


async def test_a_loop_that_does_not_settle_does_not_hold_the_rebalance(monkeypatch) -> None:
    """Faust's revoke waits without end for every read, unacked message: a loop stuck past
    the settle timeout held the whole group in its rebalance until the coordinator dropped
    this member (a minute, seen in exactly_once). Its messages are released instead: nothing
    is committed for them, the new owner reads them again."""
    monkeypatch.setattr("app.stream.consumer.SETTLE_ON_REVOKE_S", 0.05)
    consumer, _ = real_consumer({A: 10})
    committed: list[dict[TP, int]] = []

    async def commit_on_thread(offsets: dict[TP, int]) -> bool:
        committed.append(dict(offsets))
        return True

    async def stuck() -> None:
        await asyncio.sleep(3600)

    held = [message(A, 10), message(A, 11)]
    for m in held:
        consumer._unacked_messages.add(m)

    emptied: list[bool] = []

    async def faust_revoke(revoked: set[TP]) -> None:
        waiter = asyncio.ensure_future(consumer.wait_empty())  # what Faust's revoke does first
        done, _ = await asyncio.wait({waiter}, timeout=1.0)
        emptied.append(bool(done))
        if not done:
            waiter.cancel()

    consumer._thread.commit = commit_on_thread
    consumer.settlers = [stuck]
    consumer._on_partitions_revoked = faust_revoke
    await consumer.on_partitions_revoked({A})
    assert emptied == [True]
    assert not consumer._unacked_messages and committed == []
    assert not any(m.acked for m in held)


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



def test_fetch_positions_are_read_from_the_kafka_consumer_state() -> None:
    consumer, _ = real_consumer({A: 10})
    assert consumer.fetch_positions() == {}  # not started: nothing to read
    state = SimpleNamespace(_position=78)
    unpositioned = SimpleNamespace(_position=None)
    assignment = SimpleNamespace(_tp_state={A: state, B: unpositioned})
    consumer._thread._consumer = SimpleNamespace(
        _subscription=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment)))
    assert consumer.fetch_positions() == {A: 78}


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


# --- exactly_once: a topic written in transactions -------------------------------------------

ACT = TP("actions", 0)


async def _call_now(fun, *args):
    return fun(*args)


def eos_consumer(committed: int) -> FraudConsumer:
    """A consumer of an exactly_once app: `actions` is gapped, `transactions` transactional."""
    import faust

    app = faust.App("unit-eos", broker="fraudstream://127.0.0.1:1", autodiscover=False)
    app.fraudstream_chunk_topics = frozenset({"actions", "transactions"})
    app.fraudstream_transactional_topics = frozenset({"transactions"})
    app.fraudstream_processing = "exactly_once"
    app.consumer_generation_id = 1
    consumer = app.consumer
    consumer.assignment = lambda: {ACT, A}
    consumer._committed_offset[ACT] = committed
    consumer._committed_offset[A] = 0
    return consumer


def fetched(tp: TP, offsets: list[int], start: int, end: int) -> Fetched:
    """A fetch of `tp` that handed out `offsets`, its position going from `start` to `end`."""
    state = object()
    records = {tp: [SimpleNamespace(offset=o) for o in offsets]} if offsets else {}
    return Fetched(records, skipped_offsets({tp: (state, start)}, {tp: (state, end)}, records,
                                            {}))


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


async def test_records_handed_back_for_a_paused_partition_are_never_counted_done() -> None:
    """Records fetched for a partition paused meanwhile are taken out of the fetch and read
    again. The offsets the fetch position passed were counted as done, less the records left
    in the fetch: the handed-back ones too, so a commit could pass them unprocessed."""
    consumer = eos_consumer(10)
    consumer._thread.call_thread = _call_now
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


async def test_a_seek_to_a_commit_marker_is_not_waited_for_ever() -> None:
    """After a worker is killed mid-transaction, its aborted actions and their marker follow
    the dispatcher's commit: a rewind to that offset fetched the next committed record, which
    was taken for a fetch from before the seek, and the partition was re-sought for ever
    (worker-dies-exactly_once, ci53)."""
    consumer = eos_consumer(10)
    consumer.assignment = lambda: {ACT, A}
    consumer._thread.call_thread = _call_now
    consumer._thread.seek = lambda tp, offset: None
    assert await consumer.rewind(ACT, 10, "gap") is True
    consumer._fill_gaps(fetched(ACT, [15], 10, 16))  # 10..13 aborted, 14 their marker
    assert consumer.passed(ACT, 10) == 15
    assert not consumer._stale(ACT, 15)  # the target's next record ends the seek's filter


def test_at_least_once_has_no_gapped_topic() -> None:
    consumer, _ = real_consumer({A: 0})
    assert consumer.gapped_topics == frozenset() and consumer.passed(A, 5) == 5


async def test_transactional_input_offsets_are_recorded_not_committed_again() -> None:
    consumer = eos_consumer(0)
    # no broker: a commit of its own would fail here, the transaction committed these already
    assert await consumer._commit_offsets({A: 42}) is True
    assert consumer._committed_offset[A] == 42


def test_the_commit_watchdog_sees_no_stall_in_markers_acked_ahead_of_work() -> None:
    from app.stream.watchdog import CommitWatchdog

    consumer = eos_consumer(10)
    consumer._fill_gaps(fetched(ACT, [10, 11], 10, 13))  # 12: a marker
    watchdog = CommitWatchdog(["actions"], stall_s=1.0)
    assert consumer._acked[ACT] == [12] and watchdog.stuck(consumer) == []
    acked(consumer, ACT, [12, 11])  # 11 done, 10 still in work: a real stall if it lasts
    consumer._gaps[ACT] = {12}
    assert watchdog.stuck(consumer) == [(ACT, 10)]


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
