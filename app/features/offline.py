"""The offline evaluator: the online rules replayed over a transaction log, as Arrow batches.

A pass reads the log in batches (`source.LogReader`: the contract per column for Parquet,
per line for JSONL), folds each batch into every card's state with the compiled kernel
(`kernel.Fold`, CardState's rules) and derives the vectors with `vector.derive_columns`.
Memory is one batch plus the cards' states, never the log, unless the caller keeps the rows
(`compute_features` does; `write_features` streams them to a file). Reading the next batch
runs in a helper thread while the kernel folds the current one (both release the GIL).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from app.features import kernel
from app.features.declaration import FEATURE_DTYPES, FEATURE_NAMES
from app.features.merchant import MerchantTable
from app.features.source import BATCH_ROWS, Batch, LogReader
from app.features.source import SCHEMA as SOURCE_SCHEMA
from app.features.vector import derive_columns
from app.transactions.contract import DEFAULT_MAX_BYTES
from app.transactions.logfile import iter_messages

log = logging.getLogger(__name__)

#: The columns before the features in every offline table.
KEY_COLUMNS: Final = (("txn_id", pa.string()), ("card_id", pa.string()), ("ts_ms", pa.int64()))
_CHUNK: Final = 65_536
_ARROW_TYPES: Final = {"int64": pa.int64(), "float64": pa.float64()}
_PREFETCH: Final = 2  # batches read ahead of the fold
Source = str | Path | Iterable[bytes]
Progress = Callable[[int], None]


_NO_LABELS: Final = MerchantTable.of(())
#: Transaction fields a pass may carry after the features (for the backtest: lists match the
#: merchant, the fraud caught is counted in money).
#: Transaction fields a table may keep beside the features (as the log reader types them).
EXTRA_COLUMNS: Final = {f.name: f.type for f in SOURCE_SCHEMA
                        if f.name not in ("txn_id", "card_id", "ts_ms")}


def feature_schema(extra: tuple[str, ...] = ()) -> pa.Schema:
    """txn_id, card_id, ts_ms, then every feature with its declared dtype, then `extra`
    transaction fields (names of EXTRA_COLUMNS)."""
    return pa.schema(
        [*KEY_COLUMNS, *((name, _ARROW_TYPES[FEATURE_DTYPES[name]]) for name in FEATURE_NAMES),
         *((name, EXTRA_COLUMNS[name]) for name in extra)]
    )


@dataclass(frozen=True, slots=True)
class OfflineResult:
    """One row per accepted transaction in log order, and what happened to every other line."""

    table: pa.Table
    accepted: int
    late: int
    redelivered: int
    malformed: Mapping[str, int] = field(default_factory=dict)  # reason code -> count
    late_txn_ids: frozenset[str] = frozenset()
    malformed_txn_ids: frozenset[str] = frozenset()  # best effort: objects with a str txn_id

    @property
    def malformed_total(self) -> int:
        """All lines the transaction contract rejected."""
        return sum(self.malformed.values())

    @property
    def lines(self) -> int:
        """Every line read."""
        return self.accepted + self.late + self.redelivered + self.malformed_total

    def summary(self) -> str:
        """One line of counts."""
        bad = ", ".join(f"{k}={v}" for k, v in sorted(self.malformed.items())) or "none"
        return (f"accepted={self.accepted} late={self.late} redelivered={self.redelivered} "
                f"malformed={self.malformed_total} ({bad})")


class FeaturePass:
    """One pass over a log: iterate it for feature batches, then read the counts or `result`."""

    def __init__(self, source: Source, *, allowed_lateness_ms: int, now_ms: int,
                 max_bytes: int = DEFAULT_MAX_BYTES, progress: Progress | None = None,
                 batch_rows: int = BATCH_ROWS, extra: tuple[str, ...] = (),
                 merchants: MerchantTable | None = None) -> None:
        self.reader = LogReader(source, now_ms=now_ms, max_bytes=max_bytes, batch_rows=batch_rows)
        #: the label log's merchant features (None: no labels, every merchant feature 0)
        self._merchants = merchants if merchants is not None else _NO_LABELS
        self._fold = kernel.Fold(allowed_lateness_ms=allowed_lateness_ms)
        self._progress = progress
        self.schema = feature_schema(extra)
        self._extra = extra
        self.accepted = self.late = self.redelivered = 0
        self.late_txn_ids: set[str] = set()

    @property
    def total(self) -> int | None:
        """Progress units in the whole log when known (rows of a Parquet file, bytes of JSONL)."""
        return self.reader.total

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in _prefetched(iter(self.reader), _PREFETCH):
            out = self._features(batch)
            if self._progress is not None:
                self._progress(batch.progress)
            if out.num_rows:
                yield out
        log.info("offline features: %d accepted, %d late, %d redelivered, %d malformed over "
                 "%d cards", self.accepted, self.late, self.redelivered,
                 sum(self.reader.rejects.counts.values()), self._fold.cards)

    def _features(self, batch: Batch) -> pa.RecordBatch:
        valid = batch.valid
        folded = self._fold.apply(valid)
        status = folded.status
        accepted = status == kernel.ACCEPTED
        late = status == kernel.LATE
        n_acc, n_late = int(accepted.sum()), int(late.sum())
        self.accepted += n_acc
        self.late += n_late
        self.redelivered += len(status) - n_acc - n_late
        if n_late:
            self.late_txn_ids.update(valid.column("txn_id").filter(pa.array(late)).to_pylist())
        if n_acc == len(status):
            keys, prims = valid, folded.prims
        else:
            keys, prims = valid.filter(pa.array(accepted)), folded.prims[:, accepted]
        amounts = keys.column("amount_minor").to_numpy()
        arrays = [keys.column("txn_id").combine_chunks(), keys.column("card_id").combine_chunks(),
                  keys.column("ts_ms").combine_chunks()]
        arrays += [pa.array(col) for col in derive_columns(prims, np.asarray(amounts))]
        arrays += [pa.array(col) for col in self._merchants.columns(
            keys.column("merchant_id").to_pylist(), keys.column("ts_ms").to_numpy())]
        arrays += [keys.column(name).combine_chunks() for name in self._extra]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def result(self, batches: Iterable[pa.RecordBatch] = ()) -> OfflineResult:
        """The counts of the finished pass, with `batches` (the rows kept) as the table."""
        table = pa.Table.from_batches(list(batches), schema=self.schema)
        return OfflineResult(table, self.accepted, self.late, self.redelivered,
                             dict(+Counter(self.reader.rejects.counts)),
                             frozenset(self.late_txn_ids), frozenset(self.reader.rejects.txn_ids))


def _prefetched(it: Iterator[Batch], depth: int) -> Iterator[Batch]:
    """`it`, read ahead by up to `depth` items in a helper thread (errors re-raised here)."""
    q: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            q.put(("error", exc))

    thread = threading.Thread(target=work, name="feature-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "end":
                return
            if kind == "error":
                assert isinstance(value, BaseException)
                raise value
            assert isinstance(value, Batch)
            yield value
    finally:
        stop.set()
        thread.join()


def compute_features(
    source: Source,
    *,
    allowed_lateness_ms: int,
    now_ms: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: Progress | None = None,
    extra: tuple[str, ...] = (),
    merchants: MerchantTable | None = None,
) -> OfflineResult:
    """Every accepted transaction's features, in log order, with the stream's rules (and the
    `extra` transaction fields after them). `merchants`: the label log's merchant features
    (app.features.merchant; None: no labels known, every merchant feature 0).

    `source` is a log file path (.parquet read by column: the fast path; .jsonl by line) or
    raw messages. Per card, log order must equal the card's partition order (topics are keyed
    by card_id, so a log dumped from Kafka or replayed from one file has it). Without the
    compiled kernel this falls back to the reference evaluator (same results, far slower).
    """
    if not kernel.available():  # pragma: no cover - only where the extension is not built
        from app.features.reference import reference_features

        if extra:
            raise RuntimeError("extra columns need the compiled fold (pip install -e .)")
        log.warning("app.features._fold is not built: using the slow reference evaluator")
        lines = read_log(source) if isinstance(source, str | Path) else source
        return reference_features(lines, allowed_lateness_ms=allowed_lateness_ms,
                                  now_ms=now_ms, max_bytes=max_bytes)
    run = FeaturePass(source, allowed_lateness_ms=allowed_lateness_ms, now_ms=now_ms,
                      max_bytes=max_bytes, progress=progress, extra=extra, merchants=merchants)
    return run.result(list(run))


def write_features(
    source: Source,
    out: str | Path,
    *,
    allowed_lateness_ms: int,
    now_ms: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: Progress | None = None,
    merchants: MerchantTable | None = None,
) -> OfflineResult:
    """`compute_features` streamed to `out` (.parquet or .jsonl) batch by batch.

    The returned result's table is empty: memory stays one batch plus the cards' states.
    """
    run = FeaturePass(source, allowed_lateness_ms=allowed_lateness_ms, now_ms=now_ms,
                      max_bytes=max_bytes, progress=progress, merchants=merchants)
    with TableWriter(out, run.schema) as writer:
        for batch in run:
            writer.write(batch)
    return run.result()


class TableWriter:
    """Batches of one schema written to Parquet (`.parquet`) or JSON lines (`.jsonl`).

    JSON floats are written in shortest round-trip form, so they read back bit for bit.
    """

    def __init__(self, path: str | Path, schema: pa.Schema) -> None:
        p = Path(path)
        suffix = p.suffix.lower()
        if suffix not in (".parquet", ".jsonl", ".ndjson"):
            raise ValueError(f"{p}: unknown output format {suffix!r} "
                             "(expected .parquet or .jsonl)")
        self._parquet = pq.ParquetWriter(p, schema) if suffix == ".parquet" else None
        self._jsonl = None if self._parquet else p.open("wb")

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self._parquet is not None:
            self._parquet.write(batch)
            return
        assert self._jsonl is not None
        dumps = orjson.dumps
        for part in batch.to_batches(max_chunksize=_CHUNK) if isinstance(batch, pa.Table) \
                else [batch]:
            self._jsonl.writelines(dumps(row) + b"\n" for row in part.to_pylist())

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
        if self._jsonl is not None:
            self._jsonl.close()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_log(path: str | Path) -> Iterator[bytes]:
    """A transaction log's messages as raw bytes, in file order, exactly as `replay` sends them.

    `.jsonl`/`.ndjson`/`.json`: one message per line, split on b"\\n" only (an empty line is a
    message too, a malformed one). `.parquet`: each row as a JSON object of the contract's
    fields. Delegates to app.transactions.logfile so the audit sees the stream's bytes.
    """
    p = Path(path)
    if p.suffix not in (".parquet", ".jsonl", ".ndjson", ".json"):
        raise ValueError(f"{p}: unknown log format {p.suffix!r} (expected .jsonl or .parquet)")
    return iter_messages(p)


def write_table(table: pa.Table, path: str | Path) -> None:
    """Write `table` as Parquet (`.parquet`) or JSON lines (`.jsonl`), by the path's suffix."""
    with TableWriter(path, table.schema) as writer:
        writer.write(table)
