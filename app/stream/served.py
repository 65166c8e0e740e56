"""The features.served record: one typed row per scored transaction, written by the worker and
read back by `audit-skew --served TOPIC`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from app.kafka.inspect import read_topic
from app.settings import Settings


class ServedRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What was served for one transaction, and where it came from.

    On the wire a JSON object (field order as here; `features` by name, FEATURE_NAMES order).
    """

    txn_id: str
    card_id: str
    ts_ms: int
    partition: int
    offset: int
    features: dict[str, int | float]
    score: float | None
    model_version: str | None
    redelivered: bool

    def to_json(self) -> bytes:
        return _encode(self)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


_encode: Final = msgspec.json.Encoder().encode
_decode: Final = msgspec.json.Decoder(ServedRow).decode


def decode_served(raw: bytes) -> ServedRow:
    """A features.served value as its record; msgspec.DecodeError (a ValueError) if it is not one."""
    return _decode(raw)


def iter_served_rows(settings: Settings, topic: str) -> Iterator[dict[str, Any] | bytes]:
    """Every served row in `topic` up to its current end, as a mapping; a value that is not a
    served row comes as its raw bytes (the audit counts it invalid)."""
    for rec in asyncio.run(read_topic(settings, topic, timeout_s=300.0)):
        try:
            yield decode_served(rec.value).to_dict()
        except (msgspec.DecodeError, ValueError):
            yield rec.value
