"""The card_state table's persistent store: one RocksDB database per worker, offsets inside it.

Faust's own RocksDB store keeps one database per partition, so a card id that arrives on two
partitions is held twice and a read finds whichever database it opens first; here every card
is held once, whatever partition wrote it (the record says which, app.stream.state.cardrecord).

The changelog offset up to which the database holds a partition is stored in the database
itself, in the same atomic write batch as the records it covers (`write`): RocksDB's WAL
replays whole batches after a crash, so the stored offset is never ahead of the data (a
restart reads only the changelog after it, app.stream.state.restore). A database that cannot be
opened, or whose blocks fail their checksums when read through once at open (corrupt), or
written by an incompatible version, is moved aside and started empty:
local state is a cache of the changelog, never the truth. The database also records what it
mirrors (app id, changelog topic and topic id: app.stream.state.lineage), and a store, or a
partition of it, that no longer mirrors its changelog is discarded before it is read.
"""

from __future__ import annotations

import logging
import shutil
import struct
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import rocksdict
from faust.stores import base
from faust.types import TP, EventT

from app.stream.state.lineage import Lineage

log = logging.getLogger(__name__)

#: Keys of the stored offsets; card ids never start with a NUL byte (the contract's alphabet).
_OFFSET_PREFIX = b"\0offset\0"
#: A format marker: a database without it (or with another) is not ours to trust.
_FORMAT_KEY = b"\0format"
_FORMAT = b"fraudstream-cards-1"
#: What the database mirrors (app.stream.state.lineage.Lineage, as JSON).
_LINEAGE_KEY = b"\0lineage"
#: A card record's first field: the changelog (= source) partition it belongs to (cardrecord).
_PARTITION = struct.Struct("<i")
#: Cards deleted per write batch when a partition is discarded.
_DISCARD_BATCH = 10_000


@dataclass(frozen=True, slots=True)
class CardDBOptions:
    """Memory bounds of the database (README, "Card state")."""

    #: LRU block cache shared by reads: the store's only read cache.
    block_cache_bytes: int = 64 << 20
    #: One memtable's size; at most `write_buffers` of them are held before flushing.
    write_buffer_bytes: int = 16 << 20
    write_buffers: int = 2
    max_open_files: int = 256


#: What RocksDB holds in memory, by kind, and the property that reads it. Memtables are bounded
#: by write_buffer_bytes × write_buffers, the block cache (index and filter blocks included) by
#: block_cache_bytes; the table readers outside the cache are small.
MEMORY_PROPERTIES: Final = {"memtables": "rocksdb.size-all-mem-tables",
                            "block_cache": "rocksdb.block-cache-usage",
                            "table_readers": "rocksdb.estimate-table-readers-mem"}


def _unlogged() -> rocksdict.WriteOptions:
    opts = rocksdict.WriteOptions()
    opts.disable_wal = True
    return opts


_UNLOGGED = _unlogged()


def _offset_key(partition: int) -> bytes:
    return _OFFSET_PREFIX + str(partition).encode()


def held_offsets(db: rocksdict.Rdict) -> dict[int, int]:
    """Partition → the last changelog offset the database holds of it (an open database)."""
    held = {}
    it = db.iter()
    it.seek(_OFFSET_PREFIX)
    while it.valid() and it.key().startswith(_OFFSET_PREFIX):
        held[int(it.key()[len(_OFFSET_PREFIX):])] = int(it.value())
        it.next()
    return held


def open_db(path: Path, options: CardDBOptions) -> rocksdict.Rdict:
    """Open (create) the database at `path`; one that fails to open, other than for a lock
    held by another process, or lacks our format marker, is moved aside and replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = _open(path, options)
    except Exception as exc:
        if "lock" in repr(exc).lower():
            raise
        _move_aside(path, repr(exc))
        db = _open(path, options)
    try:
        verify(db)
    except Exception as exc:  # noqa: BLE001 - RocksDB reports corruption as a bare Exception
        db.close()
        _move_aside(path, repr(exc))
        db = _open(path, options)
    marker = db.get(_FORMAT_KEY)
    if marker != _FORMAT:
        if marker is not None or _has_data(db):
            db.close()
            _move_aside(path, f"format {marker!r}")
            db = _open(path, options)
        db.put(_FORMAT_KEY, _FORMAT)
    return db


def verify(db: rocksdict.Rdict) -> None:
    """Read every record once with block checksums verified, past the block cache: a corrupt
    SST file opens without complaint and fails only at the first read of a block in it, which
    would be a card's read mid-stream. About 0.5 s per 500 MB of store."""
    read = rocksdict.ReadOptions()
    read.fill_cache(False)
    read.set_verify_checksums(True)
    it = db.iter(read)
    try:
        it.seek_to_first()
        while it.valid():
            it.next()
        it.status()  # raises the corruption that stopped the iteration
    finally:
        del it  # an iterator keeps the database open (and locked) while it lives


def _has_data(db: rocksdict.Rdict) -> bool:
    it = db.iter()
    it.seek_to_first()
    return bool(it.valid())


def _move_aside(path: Path, why: str) -> None:
    aside = path.with_name(f"{path.name}.unusable-{int(time.time())}")
    log.warning("card store at %s unusable (%s): moved to %s; restoring from the changelog",
                path, why, aside)
    if path.exists():
        shutil.rmtree(aside, ignore_errors=True)
        path.rename(aside)


def _open(path: Path, options: CardDBOptions) -> rocksdict.Rdict:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_max_open_files(options.max_open_files)
    opts.set_write_buffer_size(options.write_buffer_bytes)
    opts.set_max_write_buffer_number(options.write_buffers)
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(rocksdict.Cache(options.block_cache_bytes))
    # index and filter blocks inside the bounded cache, not beside it on the heap
    table.set_cache_index_and_filter_blocks(True)
    opts.set_block_based_table_factory(table)
    return rocksdict.Rdict(str(path), options=opts)


class CardDB(base.SerializedStore):
    """A Faust store for the card_state table (raw bytes keys and values), see the module."""

    #: `write` stores a partition's offset with every batch of its records (the restore's
    #: in-memory fence relies on it: app.stream.state.restore)
    offsets_cover_records = True

    def __init__(self, url: Any, app: Any, table: Any, *, options: CardDBOptions,
                 **kwargs: Any) -> None:
        super().__init__(url, app, table, **kwargs)
        self.options = options
        self.path = Path(app.conf.tabledir) / f"{table.name}.cards.rocksdb"
        self._db: rocksdict.Rdict | None = None

    @property
    def db(self) -> rocksdict.Rdict:
        if self._db is None:
            self._db = open_db(self.path, self.options)
        return self._db

    def memory(self) -> dict[str, int]:
        """Bytes RocksDB holds in memory by kind (`MEMORY_PROPERTIES`); empty while the
        database is not open."""
        if self._db is None:
            return {}
        return {kind: int(self._db.property_int_value(prop) or 0)
                for kind, prop in MEMORY_PROPERTIES.items()}

    # --- what the engine and the restore use ---------------------------------------------

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of `keys` in one multi-get (None where absent)."""
        return self.db[keys] if keys else []  # type: ignore[no-any-return]

    def write(self, records: Iterable[tuple[bytes, bytes]], offsets: Mapping[int, int], *,
              logged: bool = True) -> None:
        """Store records and, in the same atomic batch, the changelog offset each partition
        is now held up to (`offsets`: partition → last changelog offset these records cover).
        `logged=False` leaves the batch out of the write-ahead log (a restore's bulk writes):
        until `flush` a crash loses it, and every unlogged batch after it, records and offsets
        together; nothing logged may be written before that `flush`."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in records:
            batch.put(key, value)
        for partition, offset in offsets.items():
            batch.put(_offset_key(partition), str(offset).encode())
        self.db.write(batch, None if logged else _UNLOGGED)

    def flush(self) -> None:
        """Write the memtables to disk (what `write(logged=False)` left only in memory)."""
        if self._db is not None:
            self._db.flush(True)

    # --- what it mirrors (app.stream.state.lineage) ----------------------------------------------

    def lineage(self) -> Lineage | None:
        """The lineage recorded (None: none, or not readable)."""
        raw = self.db.get(_LINEAGE_KEY)
        if raw is None:
            return None
        try:
            return Lineage.from_json(raw)
        except ValueError:
            return None

    def record_lineage(self, lineage: Lineage) -> None:
        self.db.put(_LINEAGE_KEY, lineage.to_json())

    def holds_data(self) -> bool:
        """Whether it holds any card or offset (its format marker and lineage aside)."""
        it = self.db.iter()
        it.seek_to_first()
        while it.valid():
            if it.key() not in (_FORMAT_KEY, _LINEAGE_KEY):
                return True
            it.next()
        return False

    def held_offset(self, partition: int) -> int | None:
        """The last changelog offset of `partition` the store holds (None: none)."""
        raw = self.db.get(_offset_key(partition))
        return int(raw) if raw is not None else None

    def discard_partitions(self, partitions: Collection[int]) -> int:
        """Delete every card whose record names one of `partitions` (its changelog partition,
        app.stream.state.cardrecord), then those partitions' offsets; returns how many cards went.
        The offsets go last: a crash midway leaves them, and the next recovery discards again."""
        wanted = frozenset(partitions)
        count = 0
        batch = rocksdict.WriteBatch(raw_mode=True)
        it = self.db.iter()
        it.seek(b"\x01")  # past the keys starting with NUL (marker, lineage, offsets)
        while it.valid():
            value = it.value()
            if len(value) >= _PARTITION.size and _PARTITION.unpack_from(value)[0] in wanted:
                batch.delete(it.key())
                count += 1
                if len(batch) >= _DISCARD_BATCH:
                    self.db.write(batch)
                    batch = rocksdict.WriteBatch(raw_mode=True)
            it.next()
        if len(batch):
            self.db.write(batch)
        offsets = rocksdict.WriteBatch(raw_mode=True)
        for partition in wanted:
            offsets.delete(_offset_key(partition))
        self.db.write(offsets)
        return count

    def drop(self) -> None:
        """Empty the store (local state that no longer mirrors the changelog): restored from
        scratch."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- Faust's store interface ---------------------------------------------------------

    def persisted_offset(self, tp: TP) -> int | None:
        return self.held_offset(tp.partition)

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        self.db.put(_offset_key(tp.partition), str(offset).encode())

    def apply_changelog_batch(self, batch: Iterable[EventT], to_key: Callable[[Any], Any],
                              to_value: Callable[[Any], Any]) -> None:
        records: list[tuple[bytes, bytes]] = []
        offsets: dict[int, int] = {}
        for event in batch:
            msg = event.message
            if msg.value is not None:  # the card log has no tombstones
                records.append((msg.key, msg.value))
            offsets[msg.partition] = max(msg.offset, offsets.get(msg.partition, -1))
        self.write(records, offsets)

    def _get(self, key: bytes) -> bytes | None:
        return self.db.get(key)  # type: ignore[no-any-return]

    def _set(self, key: bytes, value: bytes | None) -> None:
        self.db.put(key, value)

    def _del(self, key: bytes) -> None:
        self.db.delete(key)

    def _cards(self) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self.db.items():
            if not key.startswith(b"\0"):
                yield key, value

    def _iterkeys(self) -> Iterator[bytes]:
        return (k for k, _ in self._cards())

    def _itervalues(self) -> Iterator[bytes]:
        return (v for _, v in self._cards())

    def _iteritems(self) -> Iterator[tuple[bytes, bytes]]:
        return self._cards()

    def _size(self) -> int:
        return sum(1 for _ in self._cards())

    def _contains(self, key: bytes) -> bool:
        return self.db.get(key) is not None

    def _clear(self) -> None:
        self.drop()

    def reset_state(self) -> None:
        self.drop()

    async def on_stop(self) -> None:
        self.close()

    async def backup_partition(self, tp: Any, flush: bool = True, purge: bool = False,
                               keep: int = 1) -> None:
        raise NotImplementedError("the changelog is the card store's backup")

    def restore_backup(self, tp: Any, latest: bool = True, backup_id: int = 0) -> None:
        raise NotImplementedError("the changelog is the card store's backup")
