"""Label files (JSONL or Parquet): their rows in file order, decoded or with the reason they are
not (sending them to Kafka is app.kafka.labelimport's)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from app.transactions.labels import LabelError, LabelRecord, parse_label_row
from app.transactions.logfile import LogFileError


def iter_label_rows(path: Path) -> Iterator[tuple[int, bytes, Any]]:
    """(line or row number from 1, original bytes, the decoded row or a LabelError) of a label
    file, in order; blank JSONL lines are skipped. LogFileError when the file is unreadable."""
    if path.suffix == ".parquet":
        yield from _parquet_rows(path)
        return
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise LogFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with fh:
        for number, line in enumerate(fh, 1):
            raw = line.rstrip(b"\r\n")
            if not raw.strip():
                continue
            try:
                yield number, raw, orjson.loads(raw)
            except orjson.JSONDecodeError:
                yield number, raw, LabelError(None, "row: not valid JSON")


def read_label_records(path: Path, *, now_ms: int | None = None,
                       source: str = "import") -> Iterator[LabelRecord]:
    """Every row of a label file as the record `fraudstream labels` would send, in file order;
    ValueError naming the line and the field at the first bad row."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    for number, _raw, row in iter_label_rows(path):
        if isinstance(row, LabelError):
            raise ValueError(f"{path}:{number}: {row.reason}")
        try:
            yield parse_label_row(row, now_ms=now, default_source=source)
        except LabelError as exc:
            raise ValueError(f"{path}:{number}: {exc.reason}") from None


def _parquet_rows(path: Path) -> Iterator[tuple[int, bytes, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        number = 0
        for batch in pf.iter_batches(batch_size=65_536):
            for row in batch.to_pylist():
                number += 1
                yield number, orjson.dumps(row, default=str), row
    except pa.ArrowException as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LogFileError(f"{path} is not a readable Parquet file ({reason})") from None
