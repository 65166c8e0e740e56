"""BatchSink: records routed as Kafka's default partitioner does, one record batch per partition."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from app.kafka.records import OutRecord
from app.kafka.sink import BatchSink, partition_for
from tests.support.partitioner import KAFKA_DEFAULT_PARTITIONS


class _Batch:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes]] = []

    def append(self, *, key: bytes | None, value: bytes, timestamp: None,
               headers: list[Any]) -> object:
        self.records.append((key, value))
        return object()


class _Cluster:
    """Metadata: partitions get a leader after `elected_after` refreshes."""

    def __init__(self, partitions: dict[str, int], elected_after: int) -> None:
        self.partitions = partitions
        self.refreshes = 0
        self.elected_after = elected_after

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.partitions[topic]))

    def leader_for_partition(self, tp: Any) -> int:
        return 1 if self.refreshes >= self.elected_after else -1

    async def force_metadata_update(self) -> bool:
        self.refreshes += 1
        return True


class _Producer:
    """The part of aiokafka's producer the sink uses; counts metadata lookups."""

    def __init__(self, partitions: dict[str, int], elected_after: int = 0) -> None:
        self.partitions = partitions
        self.lookups: list[str] = []
        self.sent: list[tuple[str, int, list[tuple[bytes | None, bytes]]]] = []
        cluster = _Cluster(partitions, elected_after)
        self.client = SimpleNamespace(cluster=cluster,
                                      force_metadata_update=cluster.force_metadata_update)

    async def partitions_for(self, topic: str) -> set[int]:
        self.lookups.append(topic)
        return set(range(self.partitions[topic]))

    def create_batch(self) -> _Batch:
        return _Batch()

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> str:
        self.sent.append((topic, partition, batch.records))
        return f"{topic}:{partition}"


async def test_warm_learns_every_output_topic_before_the_first_batch() -> None:
    producer = _Producer({"p.served": 8, "p.actions": 4, "changelog": 8})
    sink = BatchSink(lambda: producer, {"features.served": "p.served", "actions": "p.actions"})
    assert await sink.warm(["changelog"]) == []
    assert sorted(producer.lookups) == ["changelog", "p.actions", "p.served"]
    await sink.send([OutRecord("actions", b"c0001", b"{}", ())])
    assert sorted(producer.lookups) == ["changelog", "p.actions", "p.served"]  # none on the way
    assert producer.sent == [("p.actions", partition_for(b"c0001", b"{}", 4), [(b"c0001", b"{}")])]


async def test_warm_waits_until_every_partition_has_a_leader() -> None:
    """A changelog the worker has just created has no leader yet: a first produce to it would
    wait for metadata retries inside a served batch, so warm waits for the election instead."""
    producer = _Producer({"p.served": 2, "changelog": 2}, elected_after=3)
    sink = BatchSink(lambda: producer, {"features.served": "p.served"})
    assert await sink.warm(["changelog"]) == []
    assert producer.client.cluster.refreshes == 3
    stuck = _Producer({"p.served": 2}, elected_after=1_000_000)
    assert await BatchSink(lambda: stuck, {"features.served": "p.served"}).warm(
        timeout_s=0.12) == ["p.served:0", "p.served:1"]


def test_keys_go_where_kafkas_default_partitioner_puts_them() -> None:
    got = [(key, n, partition_for(key, b"{}", n)) for key, n, _ in KAFKA_DEFAULT_PARTITIONS]
    assert got == KAFKA_DEFAULT_PARTITIONS


def test_the_compiled_murmur2_is_aiokafkas_for_every_key_length() -> None:
    from aiokafka.partitioner import murmur2

    from app.kafka import _partition
    rng = random.Random(7)
    for length in range(70):  # every tail length, many words
        for _ in range(20):
            key = rng.randbytes(length)
            assert _partition.murmur2(key) == murmur2(key) & 0xFFFFFFFF, key
            for n in (1, 3, 8, 12, 1000):
                assert _partition.partition(key, n) == (murmur2(key) & 0x7FFFFFFF) % n
    assert _partition.partition(bytearray(b"21"), 8) == 4  # any bytes-like key
    with pytest.raises(ValueError, match="partitions must be > 0"):
        _partition.partition(b"21", 0)
    with pytest.raises(TypeError):
        _partition.partition("21", 8)


def _decoded(batch: Any) -> list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]]:
    from aiokafka.record.default_records import DefaultRecordBatch
    return [(r.offset, r.key, r.value, list(r.headers))
            for r in DefaultRecordBatch(bytearray(batch._build()))]


async def test_records_put_straight_into_the_builder_read_back_as_the_batch_api_writes_them(
        ) -> None:
    # aiokafka's real BatchBuilder, small enough that the entries fill two batches
    from aiokafka.producer.message_accumulator import BatchBuilder

    from app.kafka.sink import send_grouped

    class Producer:
        def __init__(self, raw: bool) -> None:
            self.raw, self.batches = raw, []

        def create_batch(self) -> BatchBuilder:
            batch = BatchBuilder(1024, 0, is_transactional=0)
            if not self.raw:  # a serializer sends each record through BatchBuilder.append
                batch._value_serializer = bytes
            return batch

        async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> int:
            self.batches.append((batch.record_count(), _decoded(batch)))
            return len(self.batches)

    entries = [(b"c%02d" % i, b"v" * 40 + bytes([i]), () if i % 3 else (("h", b"x"),))
               for i in range(30)]
    raw, api = Producer(raw=True), Producer(raw=False)
    counts = [count for _, count in await send_grouped(raw, {("t", 0): entries})]
    assert counts == [count for _, count in await send_grouped(api, {("t", 0): entries})]
    assert len(counts) > 1 and sum(counts) == len(entries)  # it filled a batch and went on
    assert raw.batches == api.batches  # same counts, offsets, keys, values and headers
    assert [rec[1:] for _, recs in raw.batches for rec in recs] == [
        (key, value, list(headers)) for key, value, headers in entries]
