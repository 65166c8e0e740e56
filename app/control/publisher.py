"""Writes to the control topic (the CLI's and the action service's one producer) and reads it
whole: every write is one record acknowledged by all in-sync replicas, applied whole or not."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from app.control.fold import ACTIVE_MODEL_KEY, SHADOW_MODEL_KEY, ControlFold, fold_records
from app.kafka import topics
from app.kafka.inspect import read_topic, start_or_close
from app.rules.rule import Rule
from app.scoring.lists import EntityKind, ListEntry, Lists, control_key
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings


async def read_control(settings: Settings, *, timeout_s: float = 10.0) -> tuple[ControlFold, int]:
    """The control partition read from its start to its end, folded; and its end offset."""
    records = await read_topic(settings, settings.topic(topics.CONTROL), timeout_s=timeout_s)
    return fold_records(records), (records[-1].offset + 1 if records else 0)


class ControlPublisher:
    """One idempotent producer, started on first use (a service whose Kafka is down still
    serves everything else), writing partition 0 of the control topic."""

    def __init__(self, settings: Settings, *, timeout_s: float = 10.0) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._producer: Any = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> ControlPublisher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _ensure(self) -> Any:  # noqa: ANN401 - an aiokafka producer
        async with self._lock:
            if self._producer is None:
                from aiokafka import AIOKafkaProducer

                producer = AIOKafkaProducer(**kafka_client_kwargs(self.settings), acks="all",
                                            enable_idempotence=True,
                                            request_timeout_ms=int(self.timeout_s * 1000))
                await start_or_close(producer, timeout_s=self.timeout_s)
                self._producer = producer
            return self._producer

    async def send(self, key: bytes, value: bytes | None) -> int:
        """Write one record; its offset once acknowledged."""
        producer = await self._ensure()
        meta = await asyncio.wait_for(
            producer.send_and_wait(self.settings.topic(topics.CONTROL), value=value, key=key,
                                   partition=0), self.timeout_s)
        return int(meta.offset)

    async def put(self, entry: ListEntry) -> int:
        """Put the entity on its list (replacing any entry it had)."""
        return await self.send(entry.control_key(), entry.to_json())

    async def remove(self, kind: EntityKind, entity_id: str) -> int:
        """Take the entity off whatever list it is on (a tombstone)."""
        return await self.send(control_key(kind, entity_id), None)

    async def put_rule(self, rule: Rule) -> int:
        """Publish a rule's new version (every worker applies it from this offset on)."""
        return await self.send(rule.control_key(), rule.to_json())

    async def activate(self, version: str) -> int:
        """Record `version` as the model every worker should serve (latest wins)."""
        value = orjson.dumps({"version": version,
                              "activated_at_ms": time.time_ns() // 1_000_000})
        return await self.send(ACTIVE_MODEL_KEY, value)

    async def set_shadow(self, version: str | None) -> int:
        """Record `version` as every worker's shadow model (None: none)."""
        value = orjson.dumps({"version": version, "at_ms": time.time_ns() // 1_000_000})
        return await self.send(SHADOW_MODEL_KEY, value)

    async def state(self) -> ControlFold:
        """The control partition as it is now (the truth, whoever wrote it)."""
        fold, _ = await read_control(self.settings, timeout_s=self.timeout_s)
        return fold

    async def entries(self) -> Lists:
        return (await self.state()).lists()

    async def aclose(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None


async def publish_activation(settings: Settings, version: str) -> None:
    """`fraudstream model activate`: one activation record, acknowledged."""
    async with ControlPublisher(settings, timeout_s=30.0) as publisher:
        await publisher.activate(version)


async def publish_shadow(settings: Settings, version: str | None) -> None:
    """`fraudstream model shadow`: one shadow record (None: stop), acknowledged."""
    async with ControlPublisher(settings, timeout_s=30.0) as publisher:
        await publisher.set_shadow(version)
