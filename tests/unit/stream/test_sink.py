"""BatchSink: records routed as Kafka's default partitioner does, one record batch per partition."""

from __future__ import annotations

from typing import Any

from app.stream.records import OutRecord
from app.stream.sink import BatchSink, partition_for
from tests.support.partitioner import KAFKA_DEFAULT_PARTITIONS


class _Batch:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes]] = []

    def append(self, *, key: bytes | None, value: bytes, timestamp: None,
               headers: list[Any]) -> object:
        self.records.append((key, value))
        return object()


class _Producer:
    """The part of aiokafka's producer the sink uses; counts metadata lookups."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions
        self.lookups: list[str] = []
        self.sent: list[tuple[str, int, list[tuple[bytes | None, bytes]]]] = []

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
    await sink.warm(["changelog"])
    assert sorted(producer.lookups) == ["changelog", "p.actions", "p.served"]
    await sink.send([OutRecord("actions", b"c0001", b"{}", ())])
    assert sorted(producer.lookups) == ["changelog", "p.actions", "p.served"]  # none on the way
    assert producer.sent == [("p.actions", partition_for(b"c0001", b"{}", 4), [(b"c0001", b"{}")])]


def test_keys_go_where_kafkas_default_partitioner_puts_them() -> None:
    got = [(key, n, partition_for(key, b"{}", n)) for key, n, _ in KAFKA_DEFAULT_PARTITIONS]
    assert got == KAFKA_DEFAULT_PARTITIONS
