"""`fraudstream labels --labels FILE`: a label file's rows into the `labels` topic, bad rows to
`labels.dlq` with the reason, like transactions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.kafka import topics
from app.kafka.inspect import start_or_close
from app.kafka.records import H_FIELD, H_REASON, H_REASON_CODE
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.transactions.labelfile import iter_label_rows
from app.transactions.labels import LabelError, parse_label_row

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
