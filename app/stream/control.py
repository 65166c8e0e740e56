"""Model rollout through the compacted control topic: publish, read the latest, follow changes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson

from app.kafka import topics
from app.kafka.inspect import read_topic, start_or_close
from app.scoring.registry import LoadedModel
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings

log = logging.getLogger(__name__)

ACTIVE_MODEL_KEY: Final = b"active_model"


async def publish_control(settings: Settings, key: bytes, value: bytes) -> None:
    """Write one record to the control topic's one partition (acks=all, idempotent; the topic is
    compacted, so the latest record per key wins)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(**kafka_client_kwargs(settings), acks="all",
                                enable_idempotence=True)
    await start_or_close(producer)
    try:
        await producer.send_and_wait(settings.topic(topics.CONTROL), value=value, key=key,
                                     partition=0)
    finally:
        await producer.stop()


async def publish_activation(settings: Settings, version: str) -> None:
    """Record `version` as the model every worker should serve (compacted: latest wins)."""
    value = orjson.dumps({"version": version, "activated_at_ms": time.time_ns() // 1_000_000})
    await publish_control(settings, ACTIVE_MODEL_KEY, value)


async def latest_activation(settings: Settings) -> tuple[str | None, int]:
    """(latest activated version or None, the control topic's end offset)."""
    records = await read_topic(settings, settings.topic(topics.CONTROL), timeout_s=30.0)
    version = None
    for rec in records:
        if rec.key == ACTIVE_MODEL_KEY:
            version = _version_of(rec.value)
    end = records[-1].offset + 1 if records else 0
    return version, end


def _version_of(value: bytes) -> str | None:
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    version = obj.get("version") if isinstance(obj, dict) else None
    return version if isinstance(version, str) else None


async def follow_activations(
    settings: Settings, start_offset: int, on_version: Callable[[str], Awaitable[None]],
    *, poll_s: float = 0.5,
) -> None:
    """Call `on_version` for every activation published from `start_offset` on (runs forever).

    Every worker reads the whole control partition itself (no consumer group): an activation
    is a broadcast, not work to share.
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(settings.topic(topics.CONTROL), 0)
    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings),
                                isolation_level=settings.isolation_level,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, start_offset)
        while True:
            batch = await consumer.getmany(tp, timeout_ms=int(poll_s * 1000))
            for msg in batch.get(tp, []):
                version = _version_of(msg.value) if msg.key == ACTIVE_MODEL_KEY else None
                if version is not None:
                    await on_version(version)
    finally:
        await consumer.stop()


async def validated_model(load: Callable[[str], LoadedModel], version: str, counter: Any,
                          refused: str) -> LoadedModel | None:
    """Load and validate `version` in a thread (a session build never stalls the loop); count
    it on `counter` (`accepted` / `refused`), and log `refused` (%s: version, reason) and
    return None when it fails validation."""
    from app.scoring.contract import ModelError

    try:
        model = await asyncio.to_thread(load, version)
    except (ModelError, OSError, ValueError) as exc:
        counter.labels("refused").inc()
        log.error(refused, version, exc)
        return None
    counter.labels("accepted").inc()
    return model


def activation_handler(
    load: Callable[[str], LoadedModel], offer: Callable[[LoadedModel], None]
) -> Callable[[str], Awaitable[None]]:
    """Validate a published version, then offer it to the scoring stage; a model that fails
    validation is refused and logged, and the current one keeps serving."""
    from app.stream import metrics

    async def handle(version: str) -> None:
        model = await validated_model(load, version, metrics.MODEL_ACTIVATIONS,
                                      "model %s refused, the current model keeps serving: %s")
        if model is not None:
            offer(model)

    return handle
