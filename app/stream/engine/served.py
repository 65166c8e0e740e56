"""The features.served record: one typed row per scored transaction, written by the worker and
read back by `audit-skew --served TOPIC`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, Final, Protocol

import msgspec

from app.features.declaration import FEATURE_NAMES
from app.kafka.inspect import read_topic
from app.kafka.records import SourceMessage
from app.settings import Settings
from app.transactions.contract import Transaction


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
    #: the label feed's cut the merchant features were computed with (every label reported
    #: before it had been read: app.features.merchant); None: the whole label log (offline)
    label_cut_ms: int | None = None

    def to_json(self) -> bytes:
        return _encode(self)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


_encoder: Final = msgspec.json.Encoder()
_encode: Final = _encoder.encode
_decode: Final = msgspec.json.Decoder(ServedRow).decode

#: The served row as the score loop writes it: ServedRow's fields, `features` a struct with one
#: field per feature (FEATURE_NAMES order) instead of a dict, so the same JSON comes out without
#: a dict built and its keys checked per row (2.2× faster to build and encode).
_WireFeatures: Final = msgspec.defstruct(
    "_WireFeatures", [(name, int | float) for name in FEATURE_NAMES], frozen=True, gc=False)
_WireRow: Final = msgspec.defstruct(
    "_WireRow", [(f.name, _WireFeatures if f.name == "features" else f.type)
                 for f in msgspec.structs.fields(ServedRow)], frozen=True, gc=False)


def encode_served(txn_id: str, card_id: str, ts_ms: int, partition: int, offset: int,
                  features: Sequence[int | float], score: float | None,
                  model_version: str | None, redelivered: bool,
                  label_cut_ms: int | None = None) -> bytes:
    """`ServedRow(...).to_json()`, byte for byte, from the row's values (features in
    FEATURE_NAMES order: a TypeError when there are more or fewer)."""
    return _encode(_WireRow(txn_id, card_id, ts_ms, partition, offset, _WireFeatures(*features),
                            score, model_version, redelivered, label_cut_ms))


class ServedFields(Protocol):
    """What a served row is written from (app.stream.engine.pipeline.Scored)."""

    @property
    def txn(self) -> Transaction: ...
    @property
    def source(self) -> SourceMessage: ...
    @property
    def features(self) -> Sequence[int | float]: ...
    @property
    def redelivered(self) -> bool: ...
    @property
    def label_cut_ms(self) -> int | None: ...


def encode_served_batch(items: Sequence[ServedFields], scores: Sequence[float | None],
                        model_version: str | None) -> list[bytes]:
    """`encode_served` of each item with its score, byte for byte: by the compiled writer
    (app/stream/engine/_served.c) where it is built and handles every value of the batch, else
    by msgspec (`encode_served_batch_msgspec`)."""
    if _served is not None:
        rows = _served.encode_rows(items, scores, _encode(model_version))
        if rows is not None:
            return rows
    return encode_served_batch_msgspec(items, scores, model_version)


def encode_served_batch_msgspec(items: Sequence[ServedFields], scores: Sequence[float | None],
                                model_version: str | None) -> list[bytes]:
    """`encode_served_batch` by msgspec: the rows written one after another into one buffer
    and cut apart (msgspec's per-call output buffer starts small and is grown by realloc
    several times for a row of ~1 kB)."""
    buf = bytearray()
    into = _encoder.encode_into
    ends = []
    for item, score in zip(items, scores, strict=True):
        txn, source = item.txn, item.source
        into(_WireRow(txn.txn_id, txn.card_id, txn.ts_ms, source.partition, source.offset,
                      _WireFeatures(*item.features), score, model_version, item.redelivered,
                      item.label_cut_ms), buf, -1)
        ends.append(len(buf))
    view = memoryview(buf)
    out = []
    start = 0
    for end in ends:
        out.append(bytes(view[start:end]))
        start = end
    return out


try:
    from app.stream.engine import _served
except ImportError:  # pragma: no cover - exercised only where the extension was not built
    _served = None  # type: ignore[assignment]
if _served is not None:
    _served.configure(FEATURE_NAMES)


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
