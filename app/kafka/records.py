"""Messages in and out of the pipeline: the source message and what is produced for it."""

from __future__ import annotations

from typing import Final

import msgspec

Headers = tuple[tuple[str, bytes], ...]

H_REASON: Final = "fraudstream.reason"
H_REASON_CODE: Final = "fraudstream.reason_code"
H_FIELD: Final = "fraudstream.field"
H_SOURCE_TOPIC: Final = "fraudstream.source.topic"
H_SOURCE_PARTITION: Final = "fraudstream.source.partition"
H_SOURCE_OFFSET: Final = "fraudstream.source.offset"
#: On actions: when the transaction that decided it was appended to Kafka (ms since epoch).
H_SOURCE_APPENDED_MS: Final = "fraudstream.source.appended_ms"


class SourceMessage(msgspec.Struct, frozen=True, gc=False):
    """One consumed Kafka message, with where it came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


class OutRecord(msgspec.Struct, frozen=True, gc=False):
    """One message to produce: `topic` is the logical name (see app.kafka.topics);
    `source_partition`, the input partition of the message it was produced for, names the
    Kafka transaction that carries it in exactly_once (app.stream.engine.txnsink)."""

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers = ()
    source_partition: int | None = None


def rejected_record(
    topic: str, source: SourceMessage, *, code: str, reason: str, field: str | None = None
) -> OutRecord:
    """The source message's original key and bytes, with why and where from in headers.

    Keeping the value byte-for-byte lets anyone re-drive a fixed message from the DLQ as is.
    """
    headers: list[tuple[str, bytes]] = [
        (H_REASON_CODE, code.encode()),
        (H_REASON, reason.encode()),
        (H_SOURCE_TOPIC, source.topic.encode()),
        (H_SOURCE_PARTITION, str(source.partition).encode()),
        (H_SOURCE_OFFSET, str(source.offset).encode()),
    ]
    if field is not None:
        headers.append((H_FIELD, field.encode()))
    return OutRecord(topic, source.key, source.value, tuple(headers), source.partition)


def header_map(headers: object) -> dict[str, str]:
    """Decode a consumed message's headers (list of (name, bytes)) into a dict of strings."""
    out: dict[str, str] = {}
    for name, value in headers or ():  # type: ignore[attr-defined]
        out[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return out
