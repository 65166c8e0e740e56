"""The cluster profile's Kafka seen from a test: who leads the busiest partitions, who is in sync."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

from app.kafka.inspect import start_or_close
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.stack.kafka_cluster import PartitionState, describe_partitions


async def _end_offsets(settings: Settings, parts: Sequence[PartitionState]) -> dict[tuple[str, int], int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings), enable_auto_commit=False,
                                isolation_level=settings.isolation_level)
    await start_or_close(consumer)
    try:
        ends = await consumer.end_offsets([TopicPartition(p.topic, p.partition) for p in parts])
        return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


def leader_load(settings: Settings, names: list[str]) -> tuple[Counter[int], list[PartitionState]]:
    """Messages written so far to the partitions each broker leads (end offsets), and the
    partitions themselves."""
    parts = asyncio.run(describe_partitions(settings, names))
    ends = asyncio.run(_end_offsets(settings, parts))
    load: Counter[int] = Counter()
    for p in parts:
        load[p.leader] += ends.get((p.topic, p.partition), 0)
    return load, parts


def partitions(settings: Settings, names: list[str]) -> list[PartitionState]:
    return asyncio.run(describe_partitions(settings, names))
