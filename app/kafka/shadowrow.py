"""The features.shadow record: both models' scores and would-be decisions for one transaction,
written by the worker while a shadow model runs and read by `fraudstream model compare`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from app.kafka.inspect import read_topic
from app.settings import Settings


class ShadowRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One scored transaction under the active model (acted on) and the shadow model (never
    acted on); `*_actions` are the action types each model's policy decides."""

    txn_id: str
    card_id: str
    ts_ms: int
    partition: int
    offset: int
    redelivered: bool
    active_version: str
    active_score: float
    active_actions: list[str]
    shadow_version: str
    shadow_score: float
    shadow_actions: list[str]

    def to_json(self) -> bytes:
        return _encode(self)


_encode: Final = msgspec.json.Encoder().encode
_decode: Final = msgspec.json.Decoder(ShadowRow).decode


def decode_shadow(raw: bytes) -> ShadowRow:
    """A features.shadow value as its record; msgspec.DecodeError (a ValueError) otherwise."""
    return _decode(raw)


def iter_shadow_rows(settings: Settings, topic: str, *, timeout_s: float = 300.0
                     ) -> Iterator[ShadowRow]:
    """Every shadow row in `topic` up to its current end (values that are not rows skipped)."""
    for rec in asyncio.run(read_topic(settings, topic, timeout_s=timeout_s)):
        try:
            yield decode_shadow(rec.value)
        except (msgspec.DecodeError, ValueError):
            continue


def as_dict(row: ShadowRow) -> dict[str, Any]:
    return msgspec.structs.asdict(row)
