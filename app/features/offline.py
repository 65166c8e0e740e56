"""The offline evaluator: the online rules replayed over a transaction log, as an Arrow table."""

from __future__ import annotations

import gc
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Final

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from app.features.declaration import FEATURE_DTYPES, FEATURE_NAMES
from app.features.outcome import Accepted, Redelivered
from app.features.state import CardState
from app.transactions.contract import (
    DEFAULT_MAX_BYTES,
    ContractError,
    Transaction,
    parse_transaction,
)
from app.transactions.logfile import iter_messages

log = logging.getLogger(__name__)

#: The columns before the features in every offline table.
KEY_COLUMNS: Final = (("txn_id", pa.string()), ("card_id", pa.string()), ("ts_ms", pa.int64()))
_CHUNK: Final = 65_536
_ARROW_TYPES: Final = {"int64": pa.int64(), "float64": pa.float64()}


def feature_schema() -> pa.Schema:
    """txn_id, card_id, ts_ms, then every feature with its declared dtype."""
    return pa.schema(
        [*KEY_COLUMNS, *((name, _ARROW_TYPES[FEATURE_DTYPES[name]]) for name in FEATURE_NAMES)]
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


def _batch(rows: list[tuple[object, ...]], schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
        schema=schema,
    )


def _txn_id_of(raw: bytes) -> str | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    tid = obj.get("txn_id") if isinstance(obj, dict) else None
    return tid if isinstance(tid, str) else None


def compute_features(
    lines: Iterable[bytes],
    *,
    allowed_lateness_ms: int,
    now_ms: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> OfflineResult:
    """Validate and apply every line in log order with the online `CardState` rules.

    Per card, file order must equal the card's partition order (topics are keyed by card_id,
    so a log dumped from Kafka or replayed from one file has it). Agreement with the stream
    holds by construction: the same CardState code scores each event. Cards are independent,
    so each chunk of lines is applied card by card (each card's events still in log order),
    which keeps one card's state hot in the CPU cache; rows come out in log order.
    """
    with _gc_paused():
        return _compute(lines, allowed_lateness_ms, now_ms, max_bytes)


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Millions of short-lived, acyclic objects: the cyclic collector only costs time here
    # (about a fifth of the run); reference counting still frees everything.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _compute(
    lines: Iterable[bytes], allowed_lateness_ms: int, now_ms: int, max_bytes: int
) -> OfflineResult:
    schema = feature_schema()
    states: dict[str, CardState] = {}
    batches: list[pa.RecordBatch] = []
    malformed: Counter[str] = Counter()
    late_ids: set[str] = set()
    bad_ids: set[str] = set()
    accepted = late = redelivered = 0
    for chunk in _chunks(lines, _CHUNK):
        txns: list[Transaction] = []
        for raw in chunk:
            try:
                txns.append(parse_transaction(raw, now_ms=now_ms, max_bytes=max_bytes))
            except ContractError as exc:
                malformed[exc.rejection.code] += 1
                tid = _txn_id_of(raw) if len(raw) <= max_bytes else None
                if tid is not None:
                    bad_ids.add(tid)
        by_card: dict[str, list[int]] = {}
        for pos, txn in enumerate(txns):
            by_card.setdefault(txn.card_id, []).append(pos)
        rows: list[tuple[object, ...] | None] = [None] * len(txns)
        for card_id, positions in by_card.items():
            state = states.get(card_id)
            if state is None:
                state = states[card_id] = CardState.empty()
            for pos in positions:
                txn = txns[pos]
                outcome = state.apply(txn, allowed_lateness_ms=allowed_lateness_ms)
                if type(outcome) is Accepted:
                    rows[pos] = (txn.txn_id, card_id, txn.ts_ms, *outcome.features)
                elif type(outcome) is Redelivered:
                    redelivered += 1
                else:
                    late += 1
                    late_ids.add(txn.txn_id)
        kept = [row for row in rows if row is not None]
        accepted += len(kept)
        if kept:
            batches.append(_batch(kept, schema))
    table = pa.Table.from_batches(batches, schema=schema)
    log.info("offline features: %d accepted, %d late, %d redelivered, %d malformed over %d cards",
             accepted, late, redelivered, sum(malformed.values()), len(states))
    return OfflineResult(table, accepted, late, redelivered, dict(malformed),
                         frozenset(late_ids), frozenset(bad_ids))


def _chunks(lines: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    it = iter(lines)
    while chunk := list(islice(it, size)):
        yield chunk


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
    """Write `table` as Parquet (`.parquet`) or JSON lines (`.jsonl`), by the path's suffix.

    JSON floats are written in shortest round-trip form, so they read back bit for bit.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        pq.write_table(table, p)
    elif suffix in (".jsonl", ".ndjson"):
        dumps = orjson.dumps
        with p.open("wb") as fh:
            for batch in table.to_batches(max_chunksize=_CHUNK):
                fh.writelines(dumps(row) + b"\n" for row in batch.to_pylist())
    else:
        raise ValueError(f"{p}: unknown output format {suffix!r} (expected .parquet or .jsonl)")
