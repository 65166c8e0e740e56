"""The offline fold: CardState's rules over Arrow columns, in the compiled `_fold` kernel.

The kernel is parametrized by `vector.LAYOUT` (windows, distinct features, since_prev
windows, outliers counts), so the declaration stays the only place a feature exists; it
returns the integer primitives and `vector.derive_columns` turns them into the served vector,
as `derive` does online. Strings become integer codes here (one dictionary per column, sized
by the distinct cards / merchants / countries, never by the log); txn_ids are handed over as
Arrow buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.features.vector import LAYOUT

try:
    from app.features import _fold
except ImportError:  # pragma: no cover - exercised only where the extension was not built
    _fold = None  # type: ignore[assignment]

ACCEPTED: Final = 0
LATE: Final = 1
REDELIVERED: Final = 2
#: The columns a batch handed to `Fold.apply` must have (validated transactions).
COLUMNS: Final = ("txn_id", "card_id", "ts_ms", "amount_minor", *LAYOUT.distinct_fields)


def available() -> bool:
    """True when the compiled kernel is importable (`pip install -e .` builds it)."""
    return _fold is not None


@dataclass(frozen=True, slots=True)
class Folded:
    """What the fold made of one batch: a status per row and, for accepted rows, primitives."""

    status: np.ndarray  # uint8: ACCEPTED, LATE or REDELIVERED
    prims: np.ndarray  # int64, LAYOUT.width x rows; columns of rows not accepted hold garbage


class _Codes:
    """Stable integer codes for the values of one string column, across batches."""

    __slots__ = ("_codes",)

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._codes)

    def encode(self, column: pa.Array | pa.ChunkedArray) -> np.ndarray:
        encoded = pc.dictionary_encode(column)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        codes = self._codes
        setdefault = codes.setdefault
        lookup = np.fromiter((setdefault(v, len(codes)) for v in encoded.dictionary.to_pylist()),
                             dtype=np.int32, count=len(encoded.dictionary))
        return lookup[encoded.indices.to_numpy(zero_copy_only=False)]


def _string_buffers(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Buffer]:
    """(n + 1 int32 offsets, data buffer) of a string column, without copying the strings."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.type != pa.string():
        column = column.cast(pa.string())
    _, offsets, data = column.buffers()
    offs = np.frombuffer(offsets, dtype=np.int32)[column.offset:column.offset + len(column) + 1]
    return offs, data if data is not None else pa.py_buffer(b"")


class Fold:
    """Every card's state for one pass over a log; feed it the log's batches in order."""

    def __init__(self, *, allowed_lateness_ms: int) -> None:
        if _fold is None:
            raise RuntimeError("app.features._fold is not built: run `pip install -e .`")
        if allowed_lateness_ms < 0:
            raise ValueError(f"allowed_lateness_ms must be >= 0, got {allowed_lateness_ms}")
        fields = LAYOUT.distinct_fields
        self._folder = _fold.Folder(
            windows=LAYOUT.windows,
            distinct_fields=tuple(fields.index(f) for f, _ in LAYOUT.distinct),
            distinct_windows=tuple(w for _, w in LAYOUT.distinct),
            since_windows=LAYOUT.since,
            outliers=LAYOUT.outliers,
            fields=len(fields),
            allowed_lateness_ms=allowed_lateness_ms,
        )
        self._cards = _Codes()
        self._values = tuple(_Codes() for _ in fields)

    @property
    def cards(self) -> int:
        """Cards seen so far."""
        return len(self._cards)

    @property
    def live(self) -> int:
        """Events buffered over all cards (the state's size, bounded by the windows)."""
        return int(self._folder.live)

    def apply(self, batch: pa.RecordBatch | pa.Table) -> Folded:
        """Apply the batch's transactions (valid ones, in log order) to their cards."""
        n = batch.num_rows
        status = np.empty(n, dtype=np.uint8)
        prims = np.empty((LAYOUT.width, n), dtype=np.int64)
        if not n:
            return Folded(status, prims)
        offs, ids = _string_buffers(batch.column("txn_id"))
        values = tuple(codes.encode(batch.column(name))
                       for codes, name in zip(self._values, LAYOUT.distinct_fields, strict=True))
        self._folder.fold(
            self._cards.encode(batch.column("card_id")),
            _int64(batch.column("ts_ms")),
            _int64(batch.column("amount_minor")),
            values, offs, ids, status, prims,
        )
        return Folded(status, prims)


def _int64(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if column.type != pa.int64():
        column = column.cast(pa.int64())
    return np.ascontiguousarray(column.to_numpy(zero_copy_only=False))
