"""Allow/block lists on the compacted control topic: publish an entry or its removal, read them
all, and follow them in every worker.

Each entity's entry is one key (`list:<kind>:<id>`, app.scoring.lists.control_key) of the
control topic, beside the model activation's `active_model`: compaction keeps the latest value
per key and a removal is a tombstone (a null value), so reading the partition from its start
gives the current lists. Every worker reads the whole partition itself (a broadcast, as model
activations are) and swaps the new snapshot into the scoring stage, which reads it once per
batch. A write is one Kafka record acknowledged by all in-sync replicas: applied whole or not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final

from prometheus_client import Gauge

from app.kafka import topics
from app.kafka.inspect import read_topic, start_or_close
from app.scoring.lists import CONTROL_KEY_PREFIX, EntityKind, ListEntry, ListEntryError, Lists
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings

log = logging.getLogger(__name__)

#: A worker that has not read the lists this long after starting says so in its log (it keeps
#: waiting: scoring without a block-list it was given would be wrong).
READY_WARN_S: Final = 30.0

LIST_ENTRIES: Final = Gauge("fraudstream_list_entries",
                            "Allow/block list entries this worker applies, by list.", ["list"])


class ListFold:
    """The current entries, folded from control-topic records in offset order."""

    def __init__(self) -> None:
        self._entries: dict[bytes, ListEntry] = {}

    def apply(self, key: bytes | None, value: bytes | None) -> bool:
        """Fold one record; True when it was a list record (other keys are not ours)."""
        if key is None or not key.startswith(CONTROL_KEY_PREFIX):
            return False
        if value is None:
            self._entries.pop(key, None)
            return True
        try:
            entry = ListEntry.from_json(value)
        except ListEntryError as exc:
            # written by something other than the action service; the record stays on the
            # topic for whoever looks, and the entity's previous entry stays in force
            log.error("control topic: list record %r refused: %s", key[:80], exc.reason)
            return True
        if entry.control_key() != key:
            log.error("control topic: list record %r names another entity (%s)", key[:80],
                      entry.key)
            return True
        self._entries[key] = entry
        return True

    def lists(self) -> Lists:
        return Lists.of(self._entries.values())


def fold_records(records: Iterable[Any]) -> Lists:
    """The lists in a run of control-topic records (anything with .key and .value)."""
    fold = ListFold()
    for rec in records:
        fold.apply(rec.key, rec.value)
    return fold.lists()


async def read_lists(settings: Settings, *, timeout_s: float = 10.0) -> Lists:
    """The current lists: the control partition read from its start to its end."""
    return fold_records(await read_topic(settings, settings.topic(topics.CONTROL),
                                         timeout_s=timeout_s))


class ListPublisher:
    """Writes list entries to the control topic (the action service's, one producer, started
    on first use: a service whose Kafka is down still serves everything else)."""

    def __init__(self, settings: Settings, *, timeout_s: float = 10.0) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._producer: Any = None
        self._lock = asyncio.Lock()

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

    async def _send(self, key: bytes, value: bytes | None) -> None:
        producer = await self._ensure()
        await asyncio.wait_for(
            producer.send_and_wait(self.settings.topic(topics.CONTROL), value=value, key=key,
                                   partition=0), self.timeout_s)

    async def put(self, entry: ListEntry) -> None:
        """Put the entity on its list (replacing any entry it had); returns once acknowledged."""
        await self._send(entry.control_key(), entry.to_json())

    async def remove(self, kind: EntityKind, entity_id: str) -> None:
        """Take the entity off whatever list it is on (a tombstone); once acknowledged."""
        from app.scoring.lists import control_key

        await self._send(control_key(kind, entity_id), None)

    async def entries(self) -> Lists:
        """The current lists, read from the topic (the truth, whoever wrote it)."""
        return await read_lists(self.settings, timeout_s=self.timeout_s)

    async def aclose(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None


async def follow_lists(settings: Settings, on_lists: Callable[[Lists], None],
                       ready: asyncio.Event, *, poll_s: float = 0.5) -> None:
    """Read the control partition from its start and call `on_lists` with every new snapshot;
    `ready` is set once the records present at start have been read (runs forever)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(settings.topic(topics.CONTROL), 0)
    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings), enable_auto_commit=False,
                                isolation_level=settings.isolation_level)
    await start_or_close(consumer)
    fold = ListFold()
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = (await consumer.end_offsets([tp]))[tp]
        changed = True
        while True:
            if not ready.is_set() and await consumer.position(tp) >= end:
                on_lists(_counted(fold.lists()))
                changed = False
                ready.set()
                log.info("allow/block lists read: %d entries", len(fold.lists()))
            batch = await consumer.getmany(tp, timeout_ms=int(poll_s * 1000))
            for msg in batch.get(tp, []):
                changed = fold.apply(msg.key, msg.value) or changed
            if changed and ready.is_set():
                on_lists(_counted(fold.lists()))
                changed = False
    finally:
        await consumer.stop()


def _counted(lists: Lists) -> Lists:
    for name in ("allow", "block"):
        LIST_ENTRIES.labels(name).set(sum(1 for e in lists.entries.values() if e.list == name))
    return lists


async def wait_ready(ready: asyncio.Event) -> None:
    """Wait for the first read of the lists, saying so in the log while it takes long."""
    while True:
        try:
            await asyncio.wait_for(ready.wait(), READY_WARN_S)
            return
        except TimeoutError:
            log.warning("still reading the allow/block lists from the control topic; "
                        "not scoring until they are read")
