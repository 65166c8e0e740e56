"""A point-in-time training table as arrays: model matrix, labels, time split, fingerprint."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import numpy as np
import pyarrow as pa

from app.features.declaration import FEATURE_NAMES
from app.features.training_set import COLUMNS
from app.scoring.scorer import features_matrix

DAY_MS: Final = 86_400_000
FINGERPRINT_RULE: Final = (
    "sha256 over the training table (app.features.training_set.COLUMNS order): per column its "
    "name, then int64/float64 values as little-endian 8-byte words, strings as 4-byte length + "
    "UTF-8; rows in label-file order"
)


@dataclass(frozen=True, slots=True)
class LabelledRows:
    """The training table as the model sees it."""

    matrix: np.ndarray  # float32 [N, F], via scorer.features_matrix (the served conversion)
    labels: np.ndarray  # int64 [N], 1 = fraud
    ts_ms: np.ndarray  # int64 [N], the transaction's event time
    fingerprint: str


@dataclass(frozen=True, slots=True)
class TimeSplit:
    """Train on ts_ms < boundary_ts_ms, evaluate on ts_ms ≥ boundary_ts_ms."""

    boundary_ts_ms: int
    first_ts_ms: int
    last_ts_ms: int
    eval_fraction: float
    day_aligned: bool

    def train_mask(self, ts_ms: np.ndarray) -> np.ndarray:
        """Rows of the earlier days."""
        return ts_ms < self.boundary_ts_ms

    def describe(self) -> dict[str, object]:
        """The split as the model card records it."""
        iso = datetime.fromtimestamp(self.boundary_ts_ms / 1000, tz=UTC).isoformat()
        return {
            "by": "ts_ms (event time of the labelled transaction)",
            "train": "ts_ms < boundary_ts_ms",
            "eval": "ts_ms >= boundary_ts_ms",
            "boundary_ts_ms": self.boundary_ts_ms,
            "boundary_utc": iso,
            "first_ts_ms": self.first_ts_ms,
            "last_ts_ms": self.last_ts_ms,
            "eval_fraction": self.eval_fraction,
            "day_aligned": self.day_aligned,
        }


def fingerprint(table: pa.Table) -> str:
    """A content hash of the training table (see FINGERPRINT_RULE)."""
    digest = hashlib.sha256()
    for name in COLUMNS:
        column = table.column(name)
        digest.update(name.encode() + b"\0")
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            for value in column.to_pylist():
                raw = value.encode()
                digest.update(struct.pack("<I", len(raw)) + raw)
        else:
            values = column.to_numpy()
            digest.update(values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes())
    return "sha256:" + digest.hexdigest()


def labelled_rows(table: pa.Table) -> LabelledRows:
    """Matrix, labels and times of a training table (app.features.training_set.COLUMNS)."""
    if tuple(table.column_names) != COLUMNS:
        raise ValueError(f"training table columns {table.column_names} are not {list(COLUMNS)}")
    columns = [table.column(n).to_pylist() for n in FEATURE_NAMES]
    matrix = features_matrix(list(zip(*columns, strict=True)))
    return LabelledRows(
        matrix=matrix,
        labels=table.column("label").to_numpy().astype(np.int64),
        ts_ms=table.column("ts_ms").to_numpy().astype(np.int64),
        fingerprint=fingerprint(table),
    )


def time_split(ts_ms: np.ndarray, eval_fraction: float) -> TimeSplit:
    """Boundary at (1 − eval_fraction) of the event-time range, moved back to a UTC midnight
    when both sides keep rows (so training and evaluation are whole days)."""
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval fraction must be in (0, 1), got {eval_fraction}")
    if len(ts_ms) == 0:
        raise ValueError("the training set is empty")
    first, last = int(ts_ms.min()), int(ts_ms.max())
    boundary = first + int((last - first) * (1.0 - eval_fraction))
    midnight = boundary - boundary % DAY_MS
    aligned = first < midnight and bool((ts_ms >= midnight).any())
    cut = midnight if aligned else boundary
    if not (ts_ms < cut).any() or not (ts_ms >= cut).any():
        raise ValueError("cannot split by time: all labelled transactions share one timestamp")
    return TimeSplit(cut, first, last, eval_fraction, aligned)
