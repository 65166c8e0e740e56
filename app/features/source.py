"""Transaction logs read as validated Arrow batches: the stream's contract, per column or per line.

Parquet rows are checked by column (Arrow compute: types, ranges, the id/code patterns); a row
that does not pass that fast check is not judged by it: it is encoded as the message `replay`
would send (logfile.iter_messages) and given to `parse_transaction`, so its outcome (and
rejection code) is the stream's by construction. The fast check only ever says "valid" for
rows the contract accepts: every field present with the exact rule of contract.py, and no
valid message can exceed `_MAX_VALID_BYTES` (ids are at most 64 ASCII characters, the
integers are bounded), so the size limit cannot reject it when max_bytes is at least that.
JSON lines go through `parse_transaction` one by one (the stream's own path).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from app.features.kernel import COLUMNS
from app.ids import ID_ANCHORED
from app.transactions.contract import (
    CHANNELS,
    FIELDS,
    MAX_AMOUNT_MINOR,
    MAX_FUTURE_MS,
    MIN_TS_MS,
    ContractError,
    Transaction,
    parse_transaction,
)
from app.transactions.logfile import parquet_batches, parquet_rows

#: Rows per batch handed to the fold (bounded memory: a batch, not the log).
BATCH_ROWS: Final = 262_144
#: No message that passes the contract is longer (3 ids of 64, 19-digit ints): see the tests.
_MAX_VALID_BYTES: Final = 512
_STRING_RULES: Final = {"txn_id": ID_ANCHORED, "card_id": ID_ANCHORED, "merchant_id": ID_ANCHORED,
                        "currency": r"^[A-Z]{3}$", "country": r"^[A-Z]{2}$"}
SCHEMA: Final = pa.schema([("txn_id", pa.string()), ("card_id", pa.string()),
                            ("ts_ms", pa.int64()), ("amount_minor", pa.int64()),
                            *((f, pa.string()) for f in COLUMNS[4:])])


@dataclass(slots=True)
class Rejects:
    """Messages the contract rejected: counts by reason code, and best-effort txn_ids."""

    counts: Counter[str] = field(default_factory=Counter)
    txn_ids: set[str] = field(default_factory=set)

    def add(self, raw: bytes, exc: ContractError, max_bytes: int) -> None:
        self.counts[exc.rejection.code] += 1
        tid = _txn_id_of(raw) if len(raw) <= max_bytes else None
        if tid is not None:
            self.txn_ids.add(tid)


@dataclass(frozen=True, slots=True)
class Batch:
    """Valid transactions of a stretch of the log (COLUMNS, log order) and how much was read."""

    valid: pa.Table
    lines: int  # messages read, valid or not
    progress: int  # units of `LogReader.total` consumed (rows for Parquet, bytes for JSONL)


def _txn_id_of(raw: bytes) -> str | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    tid = obj.get("txn_id") if isinstance(obj, dict) else None
    return tid if isinstance(tid, str) else None


def _from_messages(messages: Iterable[bytes], now_ms: int, max_bytes: int,
                   rejects: Rejects) -> pa.Table:
    txns: list[Transaction] = []
    for raw in messages:
        try:
            txns.append(parse_transaction(raw, now_ms=now_ms, max_bytes=max_bytes))
        except ContractError as exc:
            rejects.add(raw, exc, max_bytes)
    return pa.Table.from_arrays(
        [pa.array([getattr(t, name) for t in txns], type=f.type)
         for name, f in zip(COLUMNS, SCHEMA, strict=True)], schema=SCHEMA)


class LogReader:
    """A log file (.parquet or .jsonl/.ndjson/.json) or raw messages, as `Batch`es in order."""

    def __init__(self, source: str | Path | Iterable[bytes], *, now_ms: int, max_bytes: int,
                 batch_rows: int = BATCH_ROWS) -> None:
        self._source = source
        self._now_ms = now_ms
        self._max_bytes = max_bytes
        self._rows = batch_rows
        self.rejects = Rejects()
        self.total: int | None = None  # progress units in all, when known
        if isinstance(source, str | Path):
            p = Path(source)
            if p.suffix not in (".parquet", ".jsonl", ".ndjson", ".json"):
                raise ValueError(f"{p}: unknown log format {p.suffix!r} "
                                 "(expected .jsonl or .parquet)")
            self.total = parquet_rows(p) if p.suffix == ".parquet" else p.stat().st_size

    def __iter__(self) -> Iterator[Batch]:
        src = self._source
        if isinstance(src, str | Path):
            p = Path(src)
            if p.suffix == ".parquet":
                return self._parquet(p)
            return self._jsonl(p)
        return self._lines(src)

    def _lines(self, lines: Iterable[bytes]) -> Iterator[Batch]:
        it = iter(lines)
        while True:
            chunk = [line for _, line in zip(range(self._rows), it, strict=False)]
            if not chunk:
                return
            valid = _from_messages(chunk, self._now_ms, self._max_bytes, self.rejects)
            yield Batch(valid, len(chunk), len(chunk))

    def _jsonl(self, path: Path) -> Iterator[Batch]:
        # Split on b"\n" only, as logfile.iter_messages (and so `replay`) does.
        with open(path, "rb") as fh:
            while True:
                chunk = fh.readlines(self._rows * 128)
                if not chunk:
                    return
                size = sum(map(len, chunk))
                msgs = [line[:-1] if line.endswith(b"\n") else line for line in chunk]
                valid = _from_messages(msgs, self._now_ms, self._max_bytes, self.rejects)
                yield Batch(valid, len(msgs), size)

    def _parquet(self, path: Path) -> Iterator[Batch]:
        for batch in parquet_batches(path, self._rows):
            cols = batch.schema.names
            yield Batch(self._parquet_batch(batch, cols), batch.num_rows, batch.num_rows)

    def _parquet_batch(self, batch: pa.RecordBatch, cols: list[str]) -> pa.Table:
        mask = _fast_mask(batch, self._now_ms, self._max_bytes)
        if mask is None:
            mask = np.zeros(batch.num_rows, dtype=bool)
        slow = np.flatnonzero(~mask)
        if slow.size:
            rows = batch.select(cols).take(pa.array(slow)).to_pylist()
            saved = Counter(self.rejects.counts), set(self.rejects.txn_ids)
            dumps = orjson.dumps
            checked = _from_messages((dumps(r) for r in rows), self._now_ms, self._max_bytes,
                                     self.rejects)
            if checked.num_rows:  # the fast check was too strict here: judge the batch by row
                self.rejects.counts, self.rejects.txn_ids = saved
                return _from_messages((dumps(r) for r in batch.select(cols).to_pylist()),
                                      self._now_ms, self._max_bytes, self.rejects)
        kept = batch.filter(pa.array(mask)) if slow.size else batch
        return pa.Table.from_arrays(
            [_plain(kept.column(name), f.type) for name, f in zip(COLUMNS, SCHEMA, strict=True)],
            schema=SCHEMA)


def _plain(column: pa.Array, typ: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column if column.type == typ else column.cast(typ)


def _fast_mask(batch: pa.RecordBatch, now_ms: int, max_bytes: int) -> np.ndarray | None:
    """Rows certainly valid under the contract (None: this batch's types need the row path)."""
    if max_bytes < _MAX_VALID_BYTES or any(f not in batch.schema.names for f in FIELDS):
        return None
    checks: list[pa.Array] = []
    for name, pattern in _STRING_RULES.items():
        col = batch.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            return None
        checks.append(pc.match_substring_regex(col, pattern))
    channel = batch.column("channel")
    if pa.types.is_dictionary(channel.type):
        channel = channel.dictionary_decode()
    if not (pa.types.is_string(channel.type) or pa.types.is_large_string(channel.type)):
        return None
    checks.append(pc.is_in(channel, value_set=pa.array(sorted(CHANNELS), type=channel.type)))
    for name, lo, hi in (("ts_ms", MIN_TS_MS, now_ms + MAX_FUTURE_MS),
                         ("amount_minor", 1, MAX_AMOUNT_MINOR), ("mcc", 0, 9999)):
        col = batch.column(name)
        if not pa.types.is_integer(col.type) or col.type == pa.uint64():
            return None
        wide = col.cast(pa.int64())
        checks.append(pc.and_(pc.greater_equal(wide, lo), pc.less_equal(wide, hi)))
    ok = checks[0]
    for c in checks[1:]:
        ok = pc.and_(ok, c)
    return ok.fill_null(False).to_numpy(zero_copy_only=False)
