"""Reading what the pipeline wrote: topic sizes, whole topics up to their end, consumer lag."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from app.security.kafka import kafka_client_kwargs
from app.settings import Settings


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed message, with its headers decoded."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, str]
    timestamp_ms: int = 0


async def start_or_close(client: Any, *, timeout_s: float | None = None) -> None:  # noqa: ANN401
    """Start an aiokafka client; if that fails (broker unreachable), close it before raising.

    A client whose start failed still holds a connection pool: closing it here keeps an
    "Unclosed AIOKafka..." warning from following the real error.
    """
    task = asyncio.current_task()
    asked = task.cancelling() if task is not None else 0
    try:
        await asyncio.wait_for(client.start(), timeout_s)
        if task is not None and task.cancelling() > asked:
            # Python 3.11's wait_for returns the start's result when a cancellation lands as
            # the start completes (fixed in 3.12): honour it, or the caller runs on for ever
            raise asyncio.CancelledError
    except BaseException:
        close = getattr(client, "stop", None) or client.close
        await close()
        raise


@asynccontextmanager
async def admin_client(settings: Settings, *, timeout_s: float = 30.0) -> AsyncIterator[Any]:
    """A started aiokafka admin client for the settings' cluster, closed on exit."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_client_kwargs(settings),
                                request_timeout_ms=int(timeout_s * 1000))
    await start_or_close(admin, timeout_s=timeout_s)
    try:
        yield admin
    finally:
        await admin.close()


async def _end_offsets(consumer: object, topic: str) -> dict[object, int]:
    from aiokafka import TopicPartition

    parts = consumer.partitions_for_topic(topic) or set()  # type: ignore[attr-defined]
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    if not tps:
        return {}
    return await consumer.end_offsets(tps)  # type: ignore[attr-defined]


async def topic_sizes(settings: Settings, names: Iterable[str]) -> dict[str, int]:
    """Messages ever written to each topic (sum of partition end offsets)."""
    ends = await _partition_ends(settings, list(names))
    return {name: sum(per.values()) for name, per in ends.items()}


async def partition_ends(settings: Settings, topic: str) -> dict[int, int]:
    """Each partition of `topic` → its end offset now."""
    return (await _partition_ends(settings, [topic]))[topic]


async def _partition_ends(settings: Settings, names: list[str]) -> dict[str, dict[int, int]]:
    """Per topic, each partition → its end offset, read by one consumer."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings),
                                isolation_level=settings.isolation_level,
                                enable_auto_commit=False)
    await start_or_close(consumer)
    try:
        await consumer._client.force_metadata_update()  # noqa: SLF001 - no public equivalent
        return {name: {tp.partition: end for tp, end in (await _end_offsets(consumer, name)).items()}
                for name in names}
    finally:
        await consumer.stop()


async def read_topic(settings: Settings, topic: str, *, timeout_s: float = 60.0) -> list[Record]:
    """Every message of `topic` from the beginning up to its end offsets at call time (in
    exactly_once: committed messages only, up to the last stable offset)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings),
                                isolation_level=settings.isolation_level,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await start_or_close(consumer)
    records: list[Record] = []
    try:
        await consumer._client.force_metadata_update()  # noqa: SLF001
        ends = {tp: off for tp, off in (await _end_offsets(consumer, topic)).items() if off > 0}
        if not ends:
            return records
        consumer.assign(list(ends))
        await consumer.seek_to_beginning(*ends)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        remaining = dict(ends)
        while remaining:
            if loop.time() > deadline:
                raise TimeoutError(f"reading {topic}: {len(remaining)} partitions not at end")
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for tp, msgs in batch.items():
                for m in msgs:
                    if m.offset < ends[tp]:
                        records.append(Record(m.topic, m.partition, m.offset, m.key, m.value,
                                              {k: v.decode("utf-8", "replace")
                                               for k, v in (m.headers or ())}, m.timestamp))
            # the fetch position, not the last record: read_committed is never handed the
            # commit markers and aborted records a transactional topic ends with
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    del remaining[tp]
        return records
    finally:
        await consumer.stop()


async def group_lag(settings: Settings, group: str, topic: str) -> int:
    """Messages of `topic` not yet committed by consumer group `group` (uncommitted = all)."""
    from aiokafka import AIOKafkaConsumer

    async with admin_client(settings) as admin:
        consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings),
                                    isolation_level=settings.isolation_level,
                                    enable_auto_commit=False)
        await start_or_close(consumer)
        try:
            await consumer._client.force_metadata_update()  # noqa: SLF001
            ends = await _end_offsets(consumer, topic)
            committed = await _committed_offsets(admin, group)
        finally:
            await consumer.stop()
    lag = 0
    for tp, end in ends.items():
        meta = committed.get(tp)
        done = meta.offset if meta is not None and meta.offset >= 0 else 0
        lag += max(0, end - done)
    return lag


async def committed_offsets(settings: Settings, group: str, topic: str) -> dict[str, int]:
    """The offset consumer group `group` committed on each partition of `topic`, named
    `topic:partition` (partitions it never committed are left out)."""
    async with admin_client(settings) as admin:
        committed = await _committed_offsets(admin, group)
    return {f"{tp.topic}:{tp.partition}": meta.offset for tp, meta in committed.items()
            if tp.topic == topic and meta is not None and meta.offset >= 0}


async def _committed_offsets(admin: object, group: str, timeout_s: float = 30.0) -> dict:
    """The group's committed offsets; retried while the group coordinator is still loading
    (the offsets topic is created on the first coordinator lookup of a fresh cluster)."""
    from aiokafka.errors import GroupCoordinatorNotAvailableError, NotCoordinatorError

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            return await admin.list_consumer_group_offsets(group)  # type: ignore[attr-defined]
        except (GroupCoordinatorNotAvailableError, NotCoordinatorError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.5)  # poll with a deadline


async def open_transaction_partitions(settings: Settings, topic: str) -> dict[int, int]:
    """Per partition of `topic` whose high watermark is above its last stable offset (an open
    transaction has written records there): HW − LSO. Empty: nothing open."""
    from aiokafka import AIOKafkaConsumer

    ends = {}
    for level in ("read_uncommitted", "read_committed"):  # HW, then LSO
        consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings), isolation_level=level,
                                    enable_auto_commit=False)
        await start_or_close(consumer)
        try:
            await consumer._client.force_metadata_update()  # noqa: SLF001 - no public equivalent
            ends[level] = {tp.partition: o for tp, o in (await _end_offsets(consumer,
                                                                            topic)).items()}
        finally:
            await consumer.stop()
    hw, lso = ends["read_uncommitted"], ends["read_committed"]
    return {p: hw[p] - lso.get(p, hw[p]) for p in hw if hw[p] > lso.get(p, hw[p])}
