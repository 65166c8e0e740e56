"""The card_state table: a Faust table whose changelog restore never moves a card backwards."""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import faust
from faust.types import EventT

from app.stream import cardrecord
from app.stream.records import SourceMessage

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


@contextlib.contextmanager
def _as_current_event(event: EventT) -> Iterator[None]:
    """Make `event` Faust's current event while its card's state is written.

    Faust picks a table write's changelog partition (and the RocksDB partition) from the
    current event. Inside `take_events` batches the context holds whichever event was buffered
    last, so each write names its own source event; otherwise state could land in another
    card's partition and be lost when partitions move between workers.
    """
    from faust.streams import _current_event  # private, but it is what Stream itself sets

    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


class TableCardStore:
    """CardStore over the card_state table, keyed by card_id bytes."""

    def __init__(self, table: faust.Table, events: dict[tuple[int, int], EventT]) -> None:
        self.table = table
        self.events = events

    def load(self, card_id: str) -> bytes | None:
        return self.table.get(card_id.encode())

    def save(self, card_id: str, data: bytes, source: SourceMessage) -> None:
        with _as_current_event(self.events[(source.partition, source.offset)]):
            self.table[card_id.encode()] = data
