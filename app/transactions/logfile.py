"""Transaction log files: JSONL (one raw message per line) or Parquet (one row per message)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from app.transactions.contract import FIELDS


class LogFileError(ValueError):
    """A log file that cannot be read as what its name says (a corrupt or foreign Parquet file)."""


def iter_messages(path: str | Path) -> Iterator[bytes]:
    """Each message of a log as the bytes a producer would send, in file order.

    JSONL lines are yielded as they are (malformed ones included, that is the point of them);
    Parquet rows are encoded as JSON objects of the contract's fields.
    """
    p = Path(path)
    if p.suffix == ".parquet":
        yield from _parquet_messages(p)
        return
    # Binary lines split on b"\n" only: an empty or all-blank line is a message too (a bad one).
    with open(p, "rb") as fh:
        for line in fh:
            yield line[:-1] if line.endswith(b"\n") else line


def _parquet_messages(path: Path) -> Iterator[bytes]:
    for batch in parquet_batches(path, 65_536):
        cols = [c for c in FIELDS if c in batch.schema.names]
        for row in batch.select(cols).to_pylist():
            yield orjson.dumps(row)


def parquet_rows(path: str | Path) -> int:
    """How many rows a Parquet log holds (its footer); LogFileError when it is not Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except pa.ArrowException as exc:
        raise _unreadable(path, exc) from None


def parquet_batches(path: str | Path, batch_rows: int,
                    columns: list[str] | None = None) -> Iterator[Any]:
    """A Parquet log's record batches (of the contract's fields present, or `columns`);
    LogFileError, naming the file, when it is not a readable Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        if columns is None:
            columns = [c for c in FIELDS if c in pf.schema_arrow.names]
        yield from pf.iter_batches(batch_size=batch_rows, columns=columns)
    except pa.ArrowException as exc:
        raise _unreadable(path, exc) from None


def _unreadable(path: str | Path, exc: Exception) -> LogFileError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return LogFileError(f"{path} is not a readable Parquet file ({reason})")


def card_key(message: bytes) -> bytes | None:
    """The Kafka key of a message: its card_id, or None when the message is not readable."""
    try:
        obj = orjson.loads(message)
    except orjson.JSONDecodeError:
        return None
    card = obj.get("card_id") if isinstance(obj, dict) else None
    return card.encode() if isinstance(card, str) and card else None
