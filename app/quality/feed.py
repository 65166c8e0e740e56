"""Reading the pipeline's topics into a QualityBook: features.served, actions and labels, from
their start, as one consumer without a group (every quality process reads everything)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

import msgspec
import orjson

from app.kafka import topics
from app.kafka.inspect import start_or_close
from app.quality.book import QualityBook
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.transactions.labels import LabelRecord

log = logging.getLogger(__name__)

#: The topics read, by logical name.
READ: Final = (topics.FEATURES_SERVED, topics.ACTIONS, topics.LABELS)


class _Served(msgspec.Struct):
    """The part of a served row the join needs (the rest is skipped while decoding)."""

    txn_id: str
    card_id: str
    ts_ms: int


class _Decided(msgspec.Struct):
    type: str
    txn_id: str
    card_id: str
    ts_ms: int


_served = msgspec.json.Decoder(_Served).decode
_decided = msgspec.json.Decoder(_Decided).decode


class QualityFeed:
    """Folds records of the three topics into `book`; counts what it read and refused."""

    def __init__(self, settings: Settings, book: QualityBook) -> None:
        self.settings = settings
        self.book = book
        self._kind = {settings.topic(t): t for t in READ}
        self.read: dict[str, int] = dict.fromkeys(READ, 0)
        self.refused: dict[str, int] = dict.fromkeys(READ, 0)

    def apply(self, topic: str, value: bytes | None) -> None:
        kind = self._kind[topic]
        self.read[kind] += 1
        try:
            if value is None:
                raise ValueError("empty value")
            if kind == topics.FEATURES_SERVED:
                row = _served(value)
                self.book.served(row.txn_id, row.card_id, row.ts_ms)
            elif kind == topics.ACTIONS:
                action = _decided(value)
                self.book.action(action.type, action.txn_id, action.card_id, action.ts_ms)
            else:
                self.book.label(LabelRecord.from_json(value))
        except (msgspec.DecodeError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            # not ours to judge (the topics have their own contracts): counted, skipped
            self.refused[kind] += 1

    async def run(self, on_tick: Callable[[], None], *, interval_s: float,
                  poll_ms: int = 500) -> None:
        """Read from the start of every partition of the three topics, forever; `on_tick` is
        called at most once per `interval_s` after new records came in (and once at first)."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(**kafka_client_kwargs(self.settings),
                                    isolation_level=self.settings.isolation_level,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    max_partition_fetch_bytes=4 * 1024 * 1024)
        await start_or_close(consumer)
        loop = asyncio.get_running_loop()
        try:
            assigned: set[Any] = set()
            last = 0.0
            dirty = True
            while True:
                names = list(self._kind)
                await consumer._client.force_metadata_update()  # noqa: SLF001 - new partitions
                wanted = {TopicPartition(n, p) for n in names
                          for p in (consumer.partitions_for_topic(n) or ())}
                if wanted != assigned:
                    consumer.assign(sorted(wanted))
                    new = wanted - assigned
                    if new:
                        await consumer.seek_to_beginning(*new)
                    assigned = wanted
                deadline = loop.time() + max(interval_s, 1.0)
                while loop.time() < deadline:
                    batch = await consumer.getmany(timeout_ms=poll_ms, max_records=20_000)
                    for tp, msgs in batch.items():
                        for msg in msgs:
                            self.apply(tp.topic, msg.value)
                        dirty = dirty or bool(msgs)
                    if dirty and loop.time() - last >= interval_s:
                        self.book.forget_old()
                        on_tick()
                        last, dirty = loop.time(), False
        finally:
            await consumer.stop()

