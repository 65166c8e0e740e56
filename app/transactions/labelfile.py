"""`fraudstream labels FILE`: label files (JSONL or Parquet) into the `labels` topic, bad rows to
`labels.dlq` with the reason, like transactions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from app.kafka import topics
from app.kafka.inspect import start_or_close
from app.kafka.records import H_FIELD, H_REASON, H_REASON_CODE
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.transactions.labels import LabelError, LabelRecord, parse_label_row
from app.transactions.logfile import LogFileError

#: DLQ headers saying where a rejected label row came from (a file, not a topic).
H_SOURCE_FILE: Final = "fraudstream.source.file"
H_SOURCE_LINE: Final = "fraudstream.source.line"
REASON_CODE: Final = "invalid_label"
_WINDOW: Final = 5000


@dataclass(frozen=True, slots=True)
class LabelImport:
    """What an import did: labels sent, rows rejected to the DLQ (and the first reason)."""

    sent: int
    rejected: int
    first_error: str | None
    seconds: float

    def summary(self) -> str:
        """One line for the terminal."""
        line = f"sent {self.sent} labels, {self.rejected} rejected to labels.dlq"
        if self.first_error:
            line += f" (first: {self.first_error})"
        return line + f" in {self.seconds:.1f}s"


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


async def send_labels(settings: Settings, path: Path, *, source: str = "import") -> LabelImport:
    """Produce every valid row of `path` to `labels` (key: card_id, else txn_id) and every
    invalid one to `labels.dlq` (original bytes; reason, field, file and line in headers).
    The file is read before anything is sent only as far as the producer's window."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(**kafka_client_kwargs(settings), acks="all",
                                enable_idempotence=True, request_timeout_ms=60_000)
    labels, dlq = settings.topic(topics.LABELS), settings.topic(topics.LABELS_DLQ)
    now_ms = time.time_ns() // 1_000_000
    t0 = time.monotonic()
    sent = rejected = 0
    first_error: str | None = None
    pending: list[asyncio.Future[object]] = []
    await start_or_close(producer)
    try:
        for number, raw, row in iter_label_rows(path):
            try:
                if isinstance(row, LabelError):
                    raise row
                record = parse_label_row(row, now_ms=now_ms, default_source=source)
            except LabelError as exc:
                rejected += 1
                first_error = first_error or f"line {number}: {exc.reason}"
                headers = [(H_REASON_CODE, REASON_CODE.encode()), (H_REASON, exc.reason.encode()),
                           (H_SOURCE_FILE, path.name.encode()),
                           (H_SOURCE_LINE, str(number).encode())]
                if exc.field is not None:
                    headers.append((H_FIELD, exc.field.encode()))
                pending.append(await producer.send(dlq, raw, headers=headers))
                continue
            pending.append(await producer.send(labels, record.to_json(), key=record.key))
            sent += 1
            if len(pending) >= _WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return LabelImport(sent, rejected, first_error, time.monotonic() - t0)
