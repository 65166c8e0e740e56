"""Point-in-time training sets: each label joined to the features its transaction was served."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson
import pyarrow as pa

from app.features.declaration import FEATURE_NAMES
from app.features.offline import OfflineResult
from app.transactions.labels import Label, LabelError, parse_label_row

#: Output columns, in order.
COLUMNS: Final = ("txn_id", "ts_ms", "card_id", *FEATURE_NAMES, "label")
_LABEL_KEYS: Final = frozenset({"txn_id", "label", "label_ts_ms"})




@dataclass(frozen=True, slots=True)
class TrainingSet:
    """The joined rows and every label that did not make it, by why."""

    table: pa.Table
    joined: int
    after_as_of: int  # labels not yet known at --as-of
    unmatched: dict[str, int]  # late / malformed / unknown / ambiguous -> labels

    @property
    def unmatched_total(self) -> int:
        """Labels whose transaction is not exactly one accepted row."""
        return sum(self.unmatched.values())


def parse_label(line: bytes, *, where: str = "label") -> Label:
    """One labels-file line; raise ValueError naming what is wrong."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON: {exc}") from None
    if not isinstance(obj, dict) or set(obj) != _LABEL_KEYS:
        raise ValueError(f"{where}: must be an object with exactly txn_id, label, label_ts_ms")
    txn_id, label, label_ts = obj["txn_id"], obj["label"], obj["label_ts_ms"]
    if type(txn_id) is not str or not txn_id:
        raise ValueError(f"{where}: txn_id must be a non-empty string")
    if type(label) is bool:
        label = int(label)
    if type(label) is not int or label not in (0, 1):
        raise ValueError(f"{where}: label must be 0, 1, true or false, got {label!r}")
    if type(label_ts) is not int:
        raise ValueError(f"{where}: label_ts_ms must be an integer")
    return Label(txn_id, label, label_ts)


def read_labels(path: str | Path) -> Iterator[Label]:
    """Labels from a JSONL file of {"txn_id", "label", "label_ts_ms"} (as `generate --labels`
    writes them) or of label-contract rows (as `fraudstream labels` reads them: transaction
    labels only); blank lines skipped."""
    p = Path(path)
    with p.open("rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict) and set(obj) != _LABEL_KEYS and "txn_id" in obj:
                try:
                    rec = parse_label_row(obj, now_ms=2**62)
                except LabelError as exc:
                    raise ValueError(f"{p}:{number}: {exc.reason}") from None
                label = rec.as_label()
                if label is not None:
                    yield label
                continue
            yield parse_label(line, where=f"{p}:{number}")


def build_training_set(
    offline: OfflineResult, labels: Iterable[Label], *, as_of_ms: int | None = None
) -> TrainingSet:
    """Join labels to their transaction's served features (as of its τ, never anything later).

    Each accepted row already holds the features computed from the events seen at or before
    the transaction, so the join is by txn_id alone; with `as_of_ms` only labels known by then
    (label_ts_ms <= as_of_ms) are used. Rows follow the labels' order.
    """
    rows_of: dict[str, int] = {}
    ambiguous: set[str] = set()
    for i, tid in enumerate(offline.table.column("txn_id").to_pylist()):
        if tid in rows_of:
            ambiguous.add(tid)  # the same txn_id accepted on two cards
        rows_of[tid] = i
    take: list[int] = []
    values: list[int] = []
    unmatched = {"late": 0, "malformed": 0, "unknown": 0, "ambiguous": 0}
    after = 0
    for lab in labels:
        if as_of_ms is not None and lab.label_ts_ms > as_of_ms:
            after += 1
        elif lab.txn_id in ambiguous:
            unmatched["ambiguous"] += 1
        elif lab.txn_id in rows_of:
            take.append(rows_of[lab.txn_id])
            values.append(lab.label)
        elif lab.txn_id in offline.late_txn_ids:
            unmatched["late"] += 1
        elif lab.txn_id in offline.malformed_txn_ids:
            unmatched["malformed"] += 1
        else:
            unmatched["unknown"] += 1
    joined = offline.table.take(pa.array(take, type=pa.int64()))
    table = joined.select(list(COLUMNS[:-1])).append_column(
        "label", pa.array(values, type=pa.int64()))
    return TrainingSet(table, len(take), after, unmatched)
