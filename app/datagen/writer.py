"""Writing a generated log to files: transactions as JSONL or Parquet, labels as JSONL."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from app.datagen.delivery import MALFORMED
from app.datagen.lines import string_columns
from app.datagen.log import GeneratedLog
from app.transactions.contract import FIELDS

if TYPE_CHECKING:
    import pyarrow as pa

OutputFormat = Literal["jsonl", "parquet"]


def output_format(path: Path) -> OutputFormat:
    """Parquet for a `.parquet` path, JSONL for anything else."""
    return "parquet" if path.suffix.lower() == ".parquet" else "jsonl"


def write_log(log: GeneratedLog, out: Path, labels: Path | None = None) -> None:
    """Write the transactions to `out` (format by suffix) and the labels to `labels`."""
    if output_format(out) == "parquet":
        write_parquet(log, out)
    else:
        write_jsonl(log, out)
    if labels is not None:
        write_labels(log, labels)


def write_jsonl(log: GeneratedLog, path: Path) -> None:
    """One message per line, bad messages as their raw bytes; written atomically."""
    write_chunks(path, log.jsonl_chunks())


def write_labels(log: GeneratedLog, path: Path) -> None:
    """{"txn_id", "label", "label_ts_ms", "merchant_id", "ts_ms"} per transaction, in file order;
    written atomically."""
    write_chunks(path, log.label_chunks())


def arrow_table(log: GeneratedLog) -> pa.Table:
    """The log's lines as a table with one column per contract field (no bad messages)."""
    import pyarrow as pa  # only Parquet output pays for pyarrow's import

    if np.any(log.delivery.kind == MALFORMED):
        raise ValueError("Parquet cannot carry malformed messages: generate with malformed=0")
    rows = log.delivery.row
    strings = string_columns(log.tag, log.txns, rows)
    ints = {
        "ts_ms": log.txns.ts[rows],
        "amount_minor": log.txns.amount[rows],
        "mcc": log.txns.mcc[rows],
    }
    columns = {
        name: pa.array(strings[name], pa.string()) if name in strings
        else pa.array(ints[name], pa.int64())
        for name in FIELDS
    }
    return pa.table(columns)


def write_parquet(log: GeneratedLog, path: Path) -> None:
    """The log as a Parquet file in file order (redeliveries repeated); written atomically."""
    import pyarrow.parquet as pq

    table = arrow_table(log)
    tmp = _tmp_path(path)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_chunks(path: Path, chunks: Iterable[bytes]) -> None:
    """`chunks` written to `path` atomically (a temporary file beside it, then renamed)."""
    tmp = _tmp_path(path)
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")
