"""Producing a batch's records through aiokafka's batch API: one record batch per partition."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

from aiokafka.partitioner import murmur2
from aiokafka.structs import TopicPartition

from app.kafka.records import OutRecord

#: (key, value, headers) of one record to produce
Entry = tuple[bytes | None, bytes, Sequence[tuple[str, bytes]]]


try:
    from app.kafka._partition import partition as _keyed_partition
except ImportError:  # pragma: no cover - exercised only where the extension was not built
    @lru_cache(maxsize=1 << 16)
    def _key_hash(key: bytes) -> int:
        return murmur2(key) & 0x7FFFFFFF

    def _keyed_partition(key: bytes, partitions: int) -> int:
        return _key_hash(key) % partitions


def partition_for(key: bytes | None, value: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key` (murmur2, as the Java client;
    compiled: app/kafka/_partition.c); a keyless record goes by a hash of its value, so a re-sent
    copy lands where the first did."""
    if key is None:
        return zlib.crc32(value) % partitions
    return _keyed_partition(key, partitions)


class BatchSink:
    """Sends records in as few produce batches as possible and returns their delivery futures.

    `producer` gives the app's aiokafka producer (created lazily by Faust); `topic_names` maps
    logical topic names (app.kafka.topics) to the deployment's names.
    """

    def __init__(self, producer: Callable[[], Any], topic_names: Mapping[str, str]) -> None:
        self._producer = producer
        self._names = dict(topic_names)
        self._partitions: dict[str, int] = {}

    async def _partition_count(self, producer: Any, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            count = self._partitions[topic] = len(await producer.partitions_for(topic))
        return count

    async def warm(self, extra: Iterable[str] = (), *, timeout_s: float = 10.0) -> list[str]:
        """Learn every output topic's partitions, and wait until each has a leader, before the
        first batch, so that no batch (the first to emit an action or a dead letter, say) waits
        on a metadata lookup, nor on the retries of a produce to a partition created moments ago
        (the card changelog of a worker that has just created it). Returns the partitions still
        without a leader when `timeout_s` ran out (they are produced to all the same)."""
        producer = self._producer()
        names = [*self._names.values(), *extra]
        for topic in names:
            await self._partition_count(producer, topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            leaderless = _leaderless(producer.client.cluster, names)
            if not leaderless or loop.time() > deadline:
                return leaderless
            await asyncio.sleep(0.05)
            await producer.client.force_metadata_update()

    async def send(self, records: Iterable[OutRecord]) -> list[asyncio.Future[Any]]:
        """Route records by key to partitions and send them; nothing is awaited but queueing."""
        producer = self._producer()
        grouped: dict[tuple[str, int], list[Entry]] = {}
        for rec in records:
            topic = self._names[rec.topic]
            count = self._partitions.get(topic) or await self._partition_count(producer, topic)
            part = partition_for(rec.key, rec.value, count)
            grouped.setdefault((topic, part), []).append((rec.key, rec.value, rec.headers))
        return await self.send_to(grouped)

    async def send_to(self, grouped: Mapping[tuple[str, int], Sequence[Entry]]
                      ) -> list[asyncio.Future[Any]]:
        """Send entries to the given (topic, partition)s, a record batch per partition."""
        return [future for future, _ in await send_grouped(self._producer(), grouped)]

    async def send_counted(self, grouped: Mapping[tuple[str, int], Sequence[Entry]]
                           ) -> list[tuple[asyncio.Future[Any], int]]:
        """`send_to`, each delivery future with the number of records its batch carries (the
        last offset written is the batch's offset plus that count, minus one)."""
        return await send_grouped(self._producer(), grouped)


def _leaderless(cluster: Any, topics: Iterable[str]) -> list[str]:
    """`topic:partition` of every partition the cluster metadata shows without a leader."""
    out = []
    for topic in topics:
        for partition in sorted(cluster.partitions_for_topic(topic) or ()):
            leader = cluster.leader_for_partition(TopicPartition(topic, partition))
            if leader is None or leader < 0:
                out.append(f"{topic}:{partition}")
    return out


async def send_grouped(producer: Any, grouped: Mapping[tuple[str, int], Sequence[Entry]]
                       ) -> list[tuple[asyncio.Future[Any], int]]:
    """Send entries to the given (topic, partition)s through `producer`'s batch API, a record
    batch per partition (more where one fills up), in order; each delivery future comes with
    the number of records it carries."""
    sent: list[tuple[asyncio.Future[Any], int]] = []
    for (topic, partition), entries in grouped.items():
        batch = producer.create_batch()
        builder = _raw_builder(batch)
        filled = 0
        for key, value, headers in entries:
            if not _append(batch, builder, filled, key, value, headers):
                if not filled:
                    raise ValueError(f"a record for {topic} does not fit in a produce batch")
                _seal(batch, builder, filled)
                sent.append((await producer.send_batch(batch, topic, partition=partition), filled))
                batch = producer.create_batch()
                builder = _raw_builder(batch)
                filled = 0
                if not _append(batch, builder, filled, key, value, headers):
                    raise ValueError(f"a record for {topic} does not fit in a produce batch")
            filled += 1
        if filled:
            _seal(batch, builder, filled)
            sent.append((await producer.send_batch(batch, topic, partition=partition), filled))
    return sent


def _raw_builder(batch: Any) -> Any | None:
    """aiokafka's compiled record builder behind a new batch, where records may go straight
    into it (no serializers: the app's raw bytes); None: through `BatchBuilder.append`, whose
    Python checks and keyword call cost 0.3 µs more a record (aiokafka 0.14, pinned)."""
    builder = getattr(batch, "_builder", None)
    if (builder is None or batch._key_serializer is not None  # noqa: SLF001
            or batch._value_serializer is not None):  # noqa: SLF001
        return None
    return builder


def _append(batch: Any, builder: Any | None, filled: int, key: bytes | None, value: bytes,
            headers: Sequence[tuple[str, bytes]]) -> bool:
    """Append a record as the batch's `filled`-th; False when it does not fit (the batch is
    then closed, as `BatchBuilder.append` leaves a full one)."""
    if builder is None:
        return batch.append(key=key, value=value, timestamp=None,
                            headers=list(headers)) is not None
    if builder.append(filled, None, key=key, value=value,
                      headers=list(headers) if headers else _NO_HEADERS) is None:
        batch.close()
        return False
    return True


def _seal(batch: Any, builder: Any | None, filled: int) -> None:
    """Records put straight into the builder: the count `BatchBuilder.record_count` reports."""
    if builder is not None:
        batch._relative_offset = filled  # noqa: SLF001


#: the record builder reads headers and keeps none of them: one empty list serves every record
_NO_HEADERS: Final[list[tuple[str, bytes]]] = []
