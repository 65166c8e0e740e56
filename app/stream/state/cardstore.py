"""The card_state table: a Faust table whose changelog restore never moves a card backwards."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import faust
from faust.types import TP, EventT

from app.kafka.sink import BatchSink, Entry
from app.stream.state import cardrecord
from app.stream.state.carddb import CardDB, CardDBOptions
from app.stream.state.memory import MemoryTarget
from app.stream.state.restore import ChangelogRestorer
from app.stream.state.store import RestoreTarget

log = logging.getLogger(__name__)


class FencedTable(faust.Table):
    """A Table whose changelog restore (recovery and standby) keeps each card's newest record.

    Faust applies changelog records in log order, so a record written late by a worker that
    had already lost the partition (a batch finishing during a rebalance), or one re-applied
    over a fresher in-memory value, would roll a card back behind messages whose offsets are
    already committed. Records carry their source position (app.stream.state.cardrecord): one behind
    the value held is dropped.
    """

    skipped_stale = 0
    #: set by `card_table`: the persistent store's bounds, and the fast changelog reader
    card_db_options: CardDBOptions | None = None
    restorer: ChangelogRestorer | None = None

    def _new_store(self) -> Any:
        if self.card_db_options is not None:
            return CardDB(self._store, self.app, self, options=self.card_db_options,
                          table_name=self.name, key_type=self.key_type,
                          key_serializer=self.key_serializer,
                          value_serializer=self.value_serializer,
                          value_type=self.value_type, loop=self.loop)
        return super()._new_store()

    def restore_target(self) -> RestoreTarget:
        data = self.data
        return data if isinstance(data, CardDB) else MemoryTarget(data)

    def held_offset(self, tp: TP, tracked: int | None) -> int:
        if isinstance(self.data, CardDB):
            held = self.data.persisted_offset(tp)
        else:  # the memory store holds what Faust has read into it this process
            held = tracked
        return -1 if held is None else held

    def store_memory(self) -> dict[str, int]:
        """What the persistent store holds in memory by kind (RocksDB's memtables and block
        cache); empty for the memory store, whose cards are Python objects."""
        data = self.data
        return data.memory() if isinstance(data, CardDB) else {}

    def raw_get(self, key: bytes) -> bytes | None:
        """The stored value of `key`, past Faust's mapping layers (the engine's read path)."""
        data = self.data
        if isinstance(data, CardDB):
            return data._get(key)
        return data.data.get(key)  # type: ignore[attr-defined, no-any-return]

    def store_cards(self, records: Sequence[tuple[bytes, bytes]],
                    offsets: Mapping[int, int]) -> None:
        """Store card records with the changelog offsets they are durable up to (one atomic
        batch on the persistent store; the memory store keeps no offsets)."""
        self.restore_target().write(records, offsets)

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


def card_table(app: faust.App, partitions: int, *, store: str = "memory://",
               db_options: CardDBOptions | None = None,
               restorer: ChangelogRestorer | None = None,
               changelog_configs: Mapping[str, Any] | None = None) -> FencedTable:
    """The card_state table on `app`: card_id bytes → card record bytes (raw codecs).

    `store` "rocksdb://" holds it in app.stream.state.carddb (with `db_options`, defaults if None);
    `restorer` reads the changelog ahead of Faust's recovery (app.stream.state.restore);
    `changelog_configs` are topic configs of its compacted changelog."""
    table = FencedTable(app, name="card_state", default=None, beacon=app.tables.beacon,
                        partitions=partitions, key_type=bytes, value_type=bytes, store=store,
                        extra_topic_configs=dict(changelog_configs or {}))
    if store.startswith("rocksdb"):
        table.card_db_options = db_options or CardDBOptions()
    table.restorer = restorer
    return app.tables.add(table)  # type: ignore[return-value]


class TableCards:
    """The card_state table as the engine's card store: read on a card's first sight, written
    at checkpoints: each card's record goes to the changelog (one per card, to the source
    partition), and once the broker has acknowledged it, into the table's store together with
    the changelog offsets now durable (never ahead of them; see app.stream.state.carddb).

    Between a snapshot (`stage`) and its store write, `load` answers from the staged records:
    the engine's decoded-card cache may have let such a card go meanwhile."""

    def __init__(self, table: FencedTable, sink: BatchSink) -> None:
        self.table = table
        self.sink = sink
        self._staged: dict[bytes, bytes] = {}

    def load(self, card_id: str) -> bytes | None:
        key = card_id.encode()
        staged = self._staged.get(key)
        if staged is not None:
            return staged
        return self.table.raw_get(key)

    def save(self, card_id: str, data: bytes, partition: int) -> None:
        self.table.store_cards([(card_id.encode(), data)], {})

    def stage(self, cards: Mapping[bytes, tuple[int, bytes]]) -> None:
        """A snapshot on its way to the store: what `load` answers for these cards until then."""
        staged = self._staged
        for key, (_, record) in cards.items():
            staged[key] = record

    async def write(self, cards: Mapping[bytes, tuple[int, bytes]]) -> list[asyncio.Future[Any]]:
        """Send each card's record to the changelog, wait for the broker, then store them with
        the offsets now durable. Returns no futures: it is durable when it returns.

        at_least_once stores one sent record batch (≤ 256 KiB) at a time, each with its own
        partition's offset (the batches of a partition are stored in log order, so the store
        never holds an offset ahead of its records), and lets the event loop run between them:
        a snapshot of 10k cards was one 60-100 ms store write that held every served row back."""
        topic = self.table.changelog_topic.get_topic_name()
        grouped: dict[tuple[str, int], list[Entry]] = {}
        for key, (partition, record) in cards.items():
            grouped.setdefault((topic, partition), []).append((key, record, ()))
        sent = await self.sink.send_counted(grouped)
        after_commit = getattr(self.sink, "after_commit", None)
        if after_commit is not None:
            offsets: dict[int, int] = {}
            for future, count in sent:
                meta = await future
                last = meta.offset + count - 1  # a record batch's offset is its first record's
                offsets[meta.partition] = max(last, offsets.get(meta.partition, -1))
            # exactly_once: the store takes only what the transaction committed, or a crash
            # before the commit would leave it holding states the changelog never got
            after_commit(lambda: self._store(cards, offsets))
            return []
        batches = iter(sent)  # send_counted's batches: each partition's entries, in order
        first = True
        for (_, partition), entries in grouped.items():
            start = 0
            while start < len(entries):
                future, count = next(batches)
                meta = await future
                if not first:
                    await asyncio.sleep(0)  # a batch waiting to be scored goes first
                first = False
                self._store_records([(key, record) for key, record, _ in
                                     entries[start:start + count]],
                                    {partition: meta.offset + count - 1})
                start += count
        return []

    def _store(self, cards: Mapping[bytes, tuple[int, bytes]], offsets: dict[int, int]) -> None:
        self._store_records([(key, record) for key, (_, record) in cards.items()], offsets)

    def _store_records(self, records: list[tuple[bytes, bytes]], offsets: dict[int, int]) -> None:
        self.table.store_cards(records, offsets)
        staged = self._staged
        for key, record in records:
            if staged.get(key) is record:  # a later snapshot's record stays staged
                del staged[key]
