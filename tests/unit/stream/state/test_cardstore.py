"""The card_state table on both stores: the restore fence (a changelog record behind the held
value is dropped) and the engine's checkpoint writes (store + one changelog record per card)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest

from app.stream.state import cardrecord
from app.stream.state.carddb import CardDBOptions
from app.stream.state.cardstore import TableCards, card_table

TableFactory = Callable[[str], faust.Table]


@pytest.fixture(params=["memory", "rocksdb"])
def table_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TableFactory]:
    """card_state tables on the memory or the RocksDB store (every test here runs on both)."""
    made: list[faust.Table] = []

    def make(app_id: str) -> faust.Table:
        app = faust.App(app_id, datadir=str(tmp_path / app_id), autodiscover=False)
        table = card_table(app, 4, store=f"{request.param}://")
        made.append(table)
        return table

    yield make
    for table in made:
        close = getattr(table.data, "close", None)
        if close is not None:
            close()


def _event(key: bytes, partition: int, offset: int, state: bytes, at: int = 0) -> SimpleNamespace:
    value = cardrecord.pack(partition, offset, state)
    topic = "t-card_state-changelog"
    message = SimpleNamespace(topic=topic, partition=partition, offset=at, key=key, value=value,
                              tp=faust.types.TP(topic, partition))
    return SimpleNamespace(key=key, value=value, message=message)


def _held(table: faust.Table, key: bytes) -> tuple[int, bytes]:
    rec = cardrecord.unpack(table.data[key])
    return rec.offset, bytes(rec.state)


def test_restore_keeps_the_newest_record_per_card(table_factory: TableFactory) -> None:
    table = table_factory("fence-test")
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


def test_a_record_from_another_partition_replaces_the_held_one(
        table_factory: TableFactory) -> None:
    # the card is held once, whatever partition wrote it (one database per worker)
    table = table_factory("fence-test-2")
    table.apply_changelog_batch([_event(b"c1", 2, 30, b"a"), _event(b"c1", 1, 5, b"b", at=1)])
    assert _held(table, b"c1") == (5, b"b")


class Sink:
    """The changelog: appends each partition's entries at its end, acknowledges at once."""

    def __init__(self) -> None:
        self.sent: dict[tuple[str, int], list[Any]] = {}

    async def send_counted(self, grouped: Any) -> list[tuple[asyncio.Future[Any], int]]:
        out = []
        for (topic, partition), entries in grouped.items():
            log = self.sent.setdefault((topic, partition), [])
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(SimpleNamespace(partition=partition, offset=len(log)))
            log.extend(entries)
            out.append((fut, len(entries)))
        return out


async def test_checkpoint_writes_reach_the_store_and_one_changelog_record_per_card(
        table_factory: TableFactory) -> None:
    table = table_factory("writes-test")
    sink = Sink()
    cards = TableCards(table, sink)  # type: ignore[arg-type]
    a, b = cardrecord.pack(1, 7, b"a7"), cardrecord.pack(3, 9, b"b9")
    await cards.write({b"c1": (1, a), b"c2": (3, b)})
    assert cards.load("c1") == a and cards.load("c2") == b and cards.load("c3") is None
    changelog = table.changelog_topic.get_topic_name()
    assert sink.sent == {(changelog, 1): [(b"c1", a, ())], (changelog, 3): [(b"c2", b, ())]}
    newer = cardrecord.pack(1, 8, b"a8")
    cards.save("c1", newer, 1)
    assert cards.load("c1") == newer


async def test_store_offsets_follow_the_acknowledged_changelog(
        table_factory: TableFactory, request: pytest.FixtureRequest) -> None:
    table = table_factory("offsets-test")
    sink = Sink()
    cards = TableCards(table, sink)  # type: ignore[arg-type]
    changelog = table.changelog_topic.get_topic_name()
    await cards.write({b"c1": (1, cardrecord.pack(1, 7, b"a")),
                       b"c2": (1, cardrecord.pack(1, 8, b"b"))})
    await cards.write({b"c1": (1, cardrecord.pack(1, 9, b"c"))})
    held = table.persisted_offset(faust.types.TP(changelog, 1))
    # the persistent store holds partition 1 up to its third changelog record; memory: none
    assert held == (2 if "rocksdb" in request.node.name else None)


async def test_a_staged_snapshot_is_read_until_it_is_stored(table_factory: TableFactory) -> None:
    table = table_factory("staged-test")
    cards = TableCards(table, Sink())  # type: ignore[arg-type]
    old, new = cardrecord.pack(0, 1, b"old"), cardrecord.pack(0, 2, b"new")
    await cards.write({b"c1": (0, old)})
    snapshot = {b"c1": (0, new)}
    cards.stage(snapshot)
    assert cards.load("c1") == new  # not in the store yet, not lost from a reader's view
    await cards.write(snapshot)
    assert cards.load("c1") == new and not cards._staged


class BatchingSink(Sink):
    """The changelog, with a record batch of at most two records (send_grouped's split)."""

    async def send_counted(self, grouped: Any) -> list[tuple[asyncio.Future[Any], int]]:
        out = []
        for key, entries in grouped.items():
            for i in range(0, len(entries), 2):
                out.extend(await super().send_counted({key: entries[i:i + 2]}))
        return out


async def test_a_snapshot_is_stored_a_record_batch_at_a_time_in_log_order(
        table_factory: TableFactory) -> None:
    """Each stored part carries its partition's offset up to its own last record (never ahead
    of what the store holds), and the event loop runs between the parts."""
    table = table_factory("sliced-test")
    cards = TableCards(table, BatchingSink())  # type: ignore[arg-type]
    stored: list[Any] = []
    store = table.store_cards

    def store_cards(records: Any, offsets: Any) -> None:
        stored.append(([key for key, _ in records], dict(offsets)))
        store(records, offsets)

    table.store_cards = store_cards  # type: ignore[method-assign]
    snapshot = {f"c{i}".encode(): (i % 2, cardrecord.pack(i % 2, i, b"s")) for i in range(7)}
    ticks = 0

    async def other_work() -> None:  # a batch to score, say
        nonlocal ticks
        while True:
            stored.append(("tick", ticks))
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other_work())
    try:
        await cards.write(snapshot)
    finally:
        task.cancel()
    parts = [entry for entry in stored if entry[0] != "tick"]
    assert parts == [([b"c0", b"c2"], {0: 1}), ([b"c4", b"c6"], {0: 3}),
                     ([b"c1", b"c3"], {1: 1}), ([b"c5"], {1: 2})]
    # between any two parts the loop ran other work
    kinds = [entry[0] == "tick" for entry in stored]
    assert all(kinds[i] or kinds[i + 1] for i in range(kinds.index(False), len(kinds) - 1))
    assert all(cards.load(f"c{i}") == snapshot[f"c{i}".encode()][1] for i in range(7))


class TransactionalSink(Sink):
    """exactly_once's sink: what is sent is committed later (`after_commit`)."""

    def __init__(self) -> None:
        super().__init__()
        self.after: list[Any] = []

    def after_commit(self, then: Any) -> None:
        self.after.append(then)


async def test_exactly_once_stores_a_snapshot_only_at_its_commit(
        table_factory: TableFactory, request: pytest.FixtureRequest) -> None:
    table = table_factory("commit-test")
    sink = TransactionalSink()
    cards = TableCards(table, sink)  # type: ignore[arg-type]
    changelog = table.changelog_topic.get_topic_name()
    record = cardrecord.pack(1, 7, b"a")
    cards.stage({b"c1": (1, record)})
    await cards.write({b"c1": (1, record)})
    # sent and acknowledged, its transaction not committed: the store holds nothing yet, and
    # the engine still reads the snapshot
    assert table.raw_get(b"c1") is None and cards.load("c1") == record
    assert table.persisted_offset(faust.types.TP(changelog, 1)) is None
    [then] = sink.after
    then()  # the commit
    assert table.raw_get(b"c1") == record and not cards._staged
    assert table.persisted_offset(faust.types.TP(changelog, 1)) == (
        0 if "rocksdb" in request.node.name else None)


def test_the_persistent_store_survives_a_reopen_with_its_offsets(tmp_path: Path) -> None:
    from app.stream.state.carddb import CardDBOptions, open_db

    db = open_db(tmp_path / "db", CardDBOptions())
    db.put(b"c1", b"x")
    db.close()
    again = open_db(tmp_path / "db", CardDBOptions())
    assert again.get(b"c1") == b"x"
    again.close()


def test_an_unreadable_store_is_moved_aside_and_started_empty(tmp_path: Path) -> None:
    from app.stream.state.carddb import CardDBOptions, open_db

    path = tmp_path / "db"
    path.mkdir()
    (path / "CURRENT").write_text("garbage\n")  # not a RocksDB database any more
    db = open_db(path, CardDBOptions())
    assert db.get(b"c1") is None
    db.put(b"c1", b"y")
    assert db.get(b"c1") == b"y"
    db.close()
    assert any(p.name.startswith("db.unusable-") for p in tmp_path.iterdir())


def test_a_store_with_a_corrupt_sst_file_is_moved_aside_at_open(tmp_path: Path) -> None:
    """A corrupt block opens without complaint and fails only when read: open reads every
    block once, so a store with one is discarded then, not at a card's read mid-stream."""
    import os

    from app.stream.state.carddb import CardDBOptions, open_db

    path = tmp_path / "db"
    db = open_db(path, CardDBOptions())
    for i in range(20_000):
        db.put(b"card%08d" % i, os.urandom(200))
    db.flush()
    db.close()
    sst = max(path.glob("*.sst"), key=lambda f: f.stat().st_size)
    with sst.open("r+b") as f:  # a block in the middle of the file, not its footer
        f.seek(sst.stat().st_size // 3)
        f.write(b"\xff" * 4096)
    again = open_db(path, CardDBOptions())
    try:
        assert again.get(b"card00000001") is None  # started empty: restored from the changelog
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("db.unusable-")]
    finally:
        again.close()


_CRASH_AFTER_WRITES = """
import os, sys
import faust
from app.stream.state.cardstore import card_table
app = faust.App("crash", datadir=sys.argv[1], autodiscover=False)
db = card_table(app, 4, store="rocksdb://").data
db.write([(b"c1", b"logged")], {0: 10})
db.write([(b"c2", b"unlogged")], {1: 20}, logged=False)
if sys.argv[2] == "flush":
    db.flush()
os._exit(0)  # a crash: nothing closed, nothing flushed on the way out
"""


@pytest.mark.parametrize("flushed", [False, True], ids=["crash-before-flush", "flushed"])
def test_an_unlogged_write_is_durable_only_once_flushed(tmp_path: Path, flushed: bool) -> None:
    """A restore's writes skip the write-ahead log (app.stream.state.restore): a crash before the
    restore's flush loses them, records and offsets together; after it they are kept."""
    import subprocess
    import sys

    from app.stream.state.carddb import _offset_key, open_db

    datadir = tmp_path / "crash"
    subprocess.run([sys.executable, "-c", _CRASH_AFTER_WRITES, str(datadir),
                    "flush" if flushed else "crash"], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parents[4])
    db = open_db(next(datadir.rglob("card_state.cards.rocksdb")), CardDBOptions())
    try:
        assert db.get(b"c1") == b"logged" and db.get(_offset_key(0)) == b"10"
        if flushed:
            assert db.get(b"c2") == b"unlogged" and db.get(_offset_key(1)) == b"20"
        else:
            assert db.get(b"c2") is None and db.get(_offset_key(1)) is None
    finally:
        db.close()


def test_the_store_reports_what_rocksdb_holds_in_memory(table_factory: TableFactory,
                                                         request: pytest.FixtureRequest) -> None:
    """An operator tells the card store's bounded memory from the worker's own: memtables
    grow with unflushed writes and empty on a flush, the block cache with reads."""
    table = table_factory("mem")
    if "memory" in request.node.name:
        assert table.store_memory() == {}  # Python objects: the process's RSS is all of it
        return
    assert table.store_memory() == {}  # not opened yet
    value = bytes(range(256)) * 4
    table.store_cards([(b"c%05d" % i, value) for i in range(5_000)], {0: 4_999})
    before = table.store_memory()
    assert set(before) == {"memtables", "block_cache", "table_readers"}
    assert before["memtables"] >= 5_000 * len(value)  # 5 MB written, none flushed
    table.data.db.flush()
    for i in range(0, 5_000, 10):
        assert table.raw_get(b"c%05d" % i) == value
    after = table.store_memory()
    assert after["memtables"] < before["memtables"] // 10
    assert after["block_cache"] >= 500 * len(value) // 4  # what the reads brought in
