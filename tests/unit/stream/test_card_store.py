"""The card_state table's restore fence: a changelog record behind the held value is dropped."""

from __future__ import annotations

from types import SimpleNamespace

import faust

from app.stream import cardrecord
from app.stream.cardstore import card_table


def _event(key: bytes, partition: int, offset: int, state: bytes, at: int = 0) -> SimpleNamespace:
    value = cardrecord.pack(partition, offset, state)
    message = SimpleNamespace(topic="t-card_state-changelog", partition=partition, offset=at,
                              key=key, value=value)
    return SimpleNamespace(key=key, value=value, message=message)


def _held(table: faust.Table, key: bytes) -> tuple[int, bytes]:
    rec = cardrecord.unpack(table.data[key])
    return rec.offset, bytes(rec.state)


def test_restore_keeps_the_newest_record_per_card() -> None:
    app = faust.App("fence-test", store="memory://", autodiscover=False)
    table = card_table(app, 4)
    table.apply_changelog_batch([
        _event(b"c1", 2, 10, b"s10", at=0),
        _event(b"c2", 2, 11, b"x11", at=1),
        _event(b"c1", 2, 30, b"s30", at=2),
        _event(b"c1", 2, 20, b"s20", at=3),  # a late write from a worker that lost the card
    ])
    assert _held(table, b"c1") == (30, b"s30")
    assert _held(table, b"c2") == (11, b"x11")
    # a later batch (standby catch-up) is fenced against what is held, not only within a batch
    table.apply_changelog_batch([_event(b"c1", 2, 25, b"s25", at=4),
                                 _event(b"c1", 2, 31, b"s31", at=5)])
    assert _held(table, b"c1") == (31, b"s31")
    assert table.skipped_stale == 2


def test_a_record_from_another_partition_replaces_the_held_one() -> None:
    app = faust.App("fence-test-2", store="memory://", autodiscover=False)
    table = card_table(app, 4)
    table.apply_changelog_batch([_event(b"c1", 2, 30, b"a"), _event(b"c1", 1, 5, b"b", at=1)])
    assert _held(table, b"c1") == (5, b"b")
