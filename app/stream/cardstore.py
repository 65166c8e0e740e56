"""The card_state table: a Faust table whose changelog restore never moves a card backwards."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Iterable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import faust
from faust.types import EventT

from app.kafka.sink import BatchSink, Entry
from app.stream import cardrecord

log = logging.getLogger(__name__)


class FencedTable(faust.Table):
    """A Table whose changelog restore (recovery and standby) keeps each card's newest record.

    Faust applies changelog records in log order, so a record written late by a worker that
    had already lost the partition (a batch finishing during a rebalance), or one re-applied
    over a fresher in-memory value, would roll a card back behind messages whose offsets are
    already committed. Records carry their source position (app.stream.cardrecord): one behind
    the value held is dropped.
    """

    skipped_stale = 0

    def apply_changelog_batch(self, batch: Iterable[EventT]) -> None:
        latest: dict[Any, bytes] = {}
        kept = []
        for event in batch:
            raw = event.message.value
            key = self._to_key(event.key)
            if raw is not None:
                current = latest.get(key)
                if current is None:
                    current = self.data.get(key)
                if not cardrecord.newer(raw, current):
                    self.skipped_stale += 1
                    log.debug("card_state: changelog record at %s[%d]@%d is behind the held "
                                "value; not restored", event.message.topic,
                                event.message.partition, event.message.offset)
                    continue
                latest[key] = raw
            kept.append(event)
        super().apply_changelog_batch(kept)


def card_table(app: faust.App, partitions: int) -> FencedTable:
    """The card_state table on `app`: card_id bytes → card record bytes (raw codecs)."""
    table = FencedTable(app, name="card_state", default=None, beacon=app.tables.beacon,
                        partitions=partitions, key_type=bytes, value_type=bytes)
    return app.tables.add(table)  # type: ignore[return-value]


class _PartitionEvent:
    """Stands for a source event of `partition` while a card is written into the store: Faust's
    RocksDB store picks its per-partition database from the current event."""

    __slots__ = ("message", "__weakref__")

    def __init__(self, partition: int) -> None:
        self.message = SimpleNamespace(partition=partition)


@contextlib.contextmanager
def _at_partition(partition: int) -> Iterator[None]:
    from faust.streams import _current_event  # private, but it is what Stream itself sets

    event = _PartitionEvent(partition)
    token = _current_event.set(weakref.ref(event))  # type: ignore[arg-type]
    try:
        yield
    finally:
        _current_event.reset(token)


class TableCards:
    """The card_state table as the engine's card store: read on a card's first sight, written
    at checkpoints straight into the table's store and its changelog (one record per card,
    to the source partition), bypassing Faust's per-write changelog buffer."""

    def __init__(self, table: faust.Table, sink: BatchSink) -> None:
        self.table = table
        self.sink = sink

    def load(self, card_id: str) -> bytes | None:
        return self.table.get(card_id.encode())

    def save(self, card_id: str, data: bytes, partition: int) -> None:
        with _at_partition(partition):
            self.table.data[card_id.encode()] = data

    async def write(self, cards: Mapping[bytes, tuple[int, bytes]]) -> list[asyncio.Future[Any]]:
        """Store each card's record and send it to the changelog; returns delivery futures."""
        data = self.table.data
        topic = self.table.changelog_topic.get_topic_name()
        grouped: dict[tuple[str, int], list[Entry]] = {}
        for key, (partition, record) in cards.items():
            grouped.setdefault((topic, partition), []).append((key, record, ()))
        for (_, partition), entries in grouped.items():
            with _at_partition(partition):  # once per partition: the store picks its database
                for key, record, _ in entries:
                    data[key] = record
        return await self.sink.send_to(grouped)
