"""exactly_once: per-input-partition transactions, fencing, and aborts between every step of a
durable point followed by a restart (a new owner) that commits each output exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
import pytest
from aiokafka.errors import ProducerFenced
from aiokafka.structs import TopicPartition

from app.kafka import topics
from app.kafka.records import OutRecord, SourceMessage
from app.stream.engine.checkpoint import Checkpoint, CheckpointFailed
from app.stream.engine.pipeline import DictCards, TransactionPipeline
from app.stream.engine.txnsink import TransactionalSink, transactional_id
from app.stream.state import cardrecord

T0 = 1_767_225_600_000
NOW = T0 + 86_400_000
SOURCE = "transactions"
CHANGELOG = "card_state-changelog"
NAMES = {name: name for name in topics.PIPELINE_TOPICS}


class Crash(Exception):
    """The worker process dies here (nothing after this line of its runs)."""


class Cluster:
    """A broker's transactional behaviour: epochs per transactional id (a newer producer fences
    the older and aborts its open transaction), records visible once committed."""

    def __init__(self) -> None:
        self.epochs: dict[str, int] = {}
        self.open: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, int, bytes | None, bytes]] = []  # committed records
        self.offsets: dict[int, int] = {}  # committed input offsets by partition
        self.crash_at: str | None = None
        self.hold_sends = False
        self.held: list[asyncio.Future[None]] = []

    def committed(self, topic: str) -> list[bytes]:
        return [value for t, _, _, value in self.log if t == topic]


class FakeProducer:
    def __init__(self, cluster: Cluster, tid: str) -> None:
        self.cluster, self.tid = cluster, tid
        self.epoch = 0
        self._txn_manager = self
        self.in_txn = False

    async def start(self) -> None:
        self.epoch = self.cluster.epochs[self.tid] = self.cluster.epochs.get(self.tid, 0) + 1
        self.cluster.open.pop(self.tid, None)  # the previous owner's transaction is aborted

    async def stop(self) -> None:
        pass

    def wait_for_pid(self) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    def is_in_transaction(self) -> bool:
        return self.in_txn

    def _check(self) -> None:
        if self.cluster.epochs[self.tid] != self.epoch:
            raise ProducerFenced()

    async def begin_transaction(self) -> None:
        self._check()
        assert not self.in_txn, "one transaction at a time"
        self.in_txn = True
        self.cluster.open[self.tid] = {"records": [], "offsets": {}}

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1}

    def create_batch(self) -> Any:
        class Batch(list):
            def append(self, *, key: Any, value: Any, timestamp: Any, headers: Any) -> int:
                super().append((key, value))
                return 1
        return Batch()

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Any:
        self._check()
        assert self.in_txn, "a send outside a transaction"
        self.cluster.open[self.tid]["records"].extend((topic, partition, k, v) for k, v in batch)
        fut = asyncio.get_running_loop().create_future()
        if self.cluster.hold_sends:
            self.cluster.held.append(fut)
        else:
            fut.set_result(None)
        return fut

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        self._check()
        if self.cluster.crash_at == "offsets":
            raise Crash()
        self.cluster.open[self.tid]["offsets"].update(
            {tp.partition: offset for tp, offset in offsets.items()})

    async def commit_transaction(self) -> None:
        self._check()
        if self.cluster.crash_at == "commit":
            raise Crash()
        txn = self.cluster.open.pop(self.tid)
        self.cluster.log.extend(txn["records"])
        self.cluster.offsets.update(txn["offsets"])
        self.in_txn = False

    async def abort_transaction(self) -> None:
        self.cluster.open.pop(self.tid, None)
        self.in_txn = False


def sink_on(cluster: Cluster) -> TransactionalSink:
    return TransactionalSink(lambda tid: FakeProducer(cluster, tid), NAMES, app_id="app",
                             source_topic=SOURCE, group_id="app")


class Msg(SourceMessage, frozen=True, gc=False):
    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def rec(partition: int, value: bytes) -> OutRecord:
    return OutRecord(topics.FEATURES_SERVED, b"card", value, source_partition=partition)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


# --- the sink --------------------------------------------------------------------------------

async def test_ids_are_per_input_partition_and_a_new_owner_fences_the_old_one() -> None:
    cluster = Cluster()
    old, new = sink_on(cluster), sink_on(cluster)
    await old.assign({0, 1}, generation=1)
    assert set(cluster.epochs) == {transactional_id("app", SOURCE, 0),
                                   transactional_id("app", SOURCE, 1)}
    await old.send([rec(0, b"a")])
    await new.assign({0}, generation=2)  # partition 0 moved: its open transaction is aborted
    cut = old.cut({0})
    with pytest.raises(ProducerFenced):
        await old.commit(cut, {TopicPartition(SOURCE, 0): 1}, _no_cards)
    assert cluster.log == [] and cluster.offsets == {}
    await new.send([rec(0, b"b")])
    await new.commit(new.cut({0}), {TopicPartition(SOURCE, 0): 1}, _no_cards)
    assert cluster.committed(topics.FEATURES_SERVED) == [b"b"] and cluster.offsets == {0: 1}


async def _no_cards() -> list[asyncio.Future[Any]]:
    return []


async def test_outputs_after_a_cut_wait_for_its_commit_and_carry_no_earlier_offsets() -> None:
    cluster = Cluster()
    sink = sink_on(cluster)
    await sink.assign({0, 1}, generation=1)
    await sink.send([rec(0, b"a"), rec(1, b"x")])
    cut = sink.cut({0, 1})
    later = asyncio.ensure_future(sink.send([rec(0, b"b")]))
    await settle()
    assert not later.done()  # partition 0's next transaction waits for the cut's commit
    await sink.commit(cut, {TopicPartition(SOURCE, 0): 5, TopicPartition(SOURCE, 1): 3},
                      _no_cards)
    await later
    assert sorted(cluster.committed(topics.FEATURES_SERVED)) == [b"a", b"x"]
    assert cluster.offsets == {0: 5, 1: 3}
    # a partition with input but no output still commits its offsets, in its own transaction
    cut = sink.cut({0, 1})
    await sink.commit(cut, {TopicPartition(SOURCE, 0): 6, TopicPartition(SOURCE, 1): 4},
                      _no_cards)
    assert cluster.committed(topics.FEATURES_SERVED)[-1] == b"b" and cluster.offsets == {0: 6, 1: 4}


@pytest.mark.parametrize("crash_at", [None, "offsets", "commit"])
async def test_the_card_store_takes_a_durable_points_states_only_once_it_committed(
        crash_at: str | None) -> None:
    """A store written before the commit would, after a crash there, hold card states the
    changelog never got (restored elsewhere without them): `after_commit` runs at the commit."""
    cluster = Cluster()
    sink = sink_on(cluster)
    await sink.assign({0}, generation=1)
    stored: list[str] = []
    await sink.send([rec(0, b"a")])
    cut = sink.cut({0})

    async def write_cards() -> list[asyncio.Future[Any]]:
        futures = await sink.send_to({(CHANGELOG, 0): [(b"c0", b"state", ())]})
        sink.after_commit(lambda: stored.append("c0"))
        assert stored == []  # sent, acknowledged or not: not committed yet
        return futures

    cluster.crash_at = crash_at
    if crash_at is None:
        await sink.commit(cut, {TopicPartition(SOURCE, 0): 1}, write_cards)
        assert stored == ["c0"] and cluster.committed(CHANGELOG) == [b"state"]
    else:
        with pytest.raises(Crash):
            await sink.commit(cut, {TopicPartition(SOURCE, 0): 1}, write_cards)
        assert stored == [] and cluster.committed(CHANGELOG) == []
    with pytest.raises(RuntimeError, match="outside a durable point"):
        sink.after_commit(lambda: None)


async def test_a_record_without_its_input_partition_is_refused() -> None:
    sink = sink_on(Cluster())
    await sink.assign({0}, generation=1)
    with pytest.raises(ValueError, match="input partition"):
        await sink.send([OutRecord(topics.ACTIONS, b"k", b"v")])


async def test_a_generation_skipped_restarts_every_producer() -> None:
    cluster = Cluster()
    sink = sink_on(cluster)
    await sink.assign({0}, generation=1)
    await sink.assign({0}, generation=2)
    assert cluster.epochs[transactional_id("app", SOURCE, 0)] == 1  # kept
    await sink.assign({0}, generation=4)  # someone else may have owned it in generation 3
    assert cluster.epochs[transactional_id("app", SOURCE, 0)] == 2


# --- abort between each step of a durable point, a new owner resumes ------------------------

def txn(i: int, card: str) -> bytes:
    amount = 1_000_000 if i % 7 == 0 else 1000
    return orjson.dumps({"txn_id": f"t{i}", "card_id": card, "ts_ms": T0 + i * 1000,
                         "amount_minor": amount, "currency": "EUR", "merchant_id": f"m{i}",
                         "mcc": 5411, "country": "FR", "channel": "pos"})


#: two input partitions, three cards each (a card stays on its partition)
LOG = [Msg(SOURCE, i % 2, i // 2, f"c{i % 6}".encode(), txn(i, f"c{i % 6}")) for i in range(40)]
STEPS = ("outputs sent", "outputs acked", "offsets", "commit", "committed")


class Store(DictCards):
    """The new owner's card store: what the committed changelog holds (newest per card)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__()
        for topic, _, key, value in cluster.log:
            if topic == CHANGELOG and key is not None:
                self.data[key.decode()] = value


async def run_owner(cluster: Cluster, batches: int, abort: tuple[int, str] | None) -> None:
    """One owner of both partitions: reads from the committed offsets, batches of 6 messages,
    a snapshot with every other batch and the last; dies at `abort` = (batch, step)."""
    store = Store(cluster)
    sink = sink_on(cluster)
    await sink.assign({0, 1}, generation=len(cluster.epochs) + 1)
    pending = [m for m in LOG if m.offset >= cluster.offsets.get(m.partition, 0)]
    pipeline = TransactionPipeline(store, clock_ms=lambda: NOW, allowed_lateness_ms=300_000,
                                   max_message_bytes=8192)

    class Cards:
        def stage(self, cards: Any) -> None:
            """Nothing to answer reads from meanwhile: the test reads the topics."""

        async def write(self, cards: Any) -> list[asyncio.Future[Any]]:
            grouped: dict[tuple[str, int], list[Any]] = {}
            for key, (part, record) in cards.items():
                grouped.setdefault((CHANGELOG, part), []).append((key, record, ()))
            return await sink.send_to(grouped)

    ckpt = Checkpoint(sink.send, Cards(), lambda msgs: None, transactions=sink)
    task = asyncio.ensure_future(ckpt.run())
    cluster.crash_at, cluster.hold_sends = None, False
    try:
        chunks = [pending[i:i + 6] for i in range(0, len(pending), 6)][:batches]
        for n, batch in enumerate(chunks):
            out = pipeline.process(batch, snapshot=False)
            records = list(out.records)
            for item in out.scored:  # a stand-in for scoring: a served row and an action
                records.append(OutRecord(topics.FEATURES_SERVED, item.txn.card_id.encode(),
                                         item.txn.txn_id.encode(), (), item.source.partition))
                if item.txn.ts_ms % 7000 == 0:
                    records.append(OutRecord(topics.ACTIONS, item.txn.card_id.encode(),
                                             f"freeze:{item.txn.txn_id}".encode(), (),
                                             item.source.partition))
            step = abort[1] if abort and abort[0] == n else None
            cluster.hold_sends = step == STEPS[0]
            if step in (STEPS[2], STEPS[3]):
                cluster.crash_at = step  # the next durable point dies there
            try:
                await ckpt.submit(records, None, batch)
            except CheckpointFailed:
                return  # died inside an earlier durable point
            if n % 2 == 1 or n == len(chunks) - 1:
                ckpt.seal({k.encode(): v for k, v in pipeline.snapshot().items()})
            await settle()  # earlier durable points complete meanwhile (batches in flight)
            if step in (STEPS[0], STEPS[1]):
                return  # outputs in open transactions (acknowledged or not): never committed
            if step == STEPS[4]:
                await ckpt.drain()
                return  # committed, the process dies before anything else
        try:
            await ckpt.drain()
        except CheckpointFailed:
            return  # died inside a durable point
    finally:
        task.cancel()
        cluster.hold_sends = False
        for fut in cluster.held:
            if not fut.done():
                fut.set_result(None)


@pytest.mark.parametrize("abort", [(b, s) for b in (0, 1, 3) for s in STEPS])
async def test_abort_anywhere_then_a_new_owner_commits_every_output_exactly_once(
        abort: tuple[int, str]) -> None:
    clean = Cluster()
    await run_owner(clean, 100, None)
    cluster = Cluster()
    await run_owner(cluster, 100, abort)
    await run_owner(cluster, 100, None)  # the next owner (fences, aborts what was open)
    for topic in (topics.FEATURES_SERVED, topics.ACTIONS):
        rows = cluster.committed(topic)
        assert Counter(rows).most_common(1)[0][1] == 1, f"a committed duplicate in {topic}"
        assert sorted(rows) == sorted(clean.committed(topic))
    assert cluster.offsets == clean.offsets == {0: 20, 1: 20}
    assert {k: cardrecord.unpack(v).state.tobytes() for k, v in Store(cluster).data.items()} == \
        {k: cardrecord.unpack(v).state.tobytes() for k, v in Store(clean).data.items()}
