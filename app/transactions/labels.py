"""The label contract: when a transaction's (or card's) truth, fraud or not, became known.

Two shapes: `Label` (txn_id, label, label_ts_ms) is what training sets join; `LabelRecord` is
one message of the Kafka topic `labels` (key: card_id, else txn_id; JSON), written by
`fraudstream labels --labels FILE` (chargebacks, confirmed fraud) and by the action service's analyst
decisions (release: 0, confirm: 1). `parse_label_row` checks one input row and raises
LabelError naming the field; `label_id` is deterministic, so re-sending a file is
recognisable downstream (consumers keep the first record of a label_id).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson

from app.errors import FieldError
from app.ids import ID_RE, ID_RULE
from app.transactions.contract import MIN_TS_MS

_ALLOWED: Final = ("txn_id", "card_id", "label", "reported_at", "label_ts_ms", "source",
                   "merchant_id", "ts_ms")
#: reported_at may lie at most this far in the future (clock skew of the reporting system).
_FUTURE_SLACK_MS: Final = 86_400_000
LABEL_SCHEME: Final = "fraudstream.label-id.v1"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Label:
    """A fraud label for one transaction: 1 fraud, 0 legitimate, known from `label_ts_ms` on."""

    txn_id: str
    label: int
    label_ts_ms: int


class LabelError(FieldError):
    """A label row that is not acceptable; `field` names the culprit (None: the whole row)."""


@dataclass(frozen=True, slots=True)
class LabelRecord:
    """One message of the `labels` topic. At least one of txn_id and card_id is set."""

    label_id: str
    txn_id: str | None
    card_id: str | None
    label: int
    reported_at_ms: int
    source: str
    by: str | None = None
    #: the labelled transaction's merchant and event time, when the reporter knows them: only
    #: such labels feed the merchant features (app.features.merchant)
    merchant_id: str | None = None
    txn_ts_ms: int | None = None

    @property
    def key(self) -> bytes:
        """The Kafka key: the card (like every pipeline topic) when known, else the txn."""
        return (self.card_id or self.txn_id or "").encode()

    def to_json(self) -> bytes:
        return orjson.dumps({"label_id": self.label_id, "txn_id": self.txn_id,
                             "card_id": self.card_id, "label": self.label,
                             "reported_at_ms": self.reported_at_ms, "source": self.source,
                             "by": self.by, "merchant_id": self.merchant_id,
                             "txn_ts_ms": self.txn_ts_ms})

    @classmethod
    def from_json(cls, raw: bytes) -> LabelRecord:
        obj = orjson.loads(raw)
        return cls(obj["label_id"], obj["txn_id"], obj["card_id"], int(obj["label"]),
                   int(obj["reported_at_ms"]), obj["source"], obj.get("by"),
                   obj.get("merchant_id"), obj.get("txn_ts_ms"))

    def as_label(self) -> Label | None:
        """The training-set shape (transaction labels only)."""
        return Label(self.txn_id, self.label, self.reported_at_ms) if self.txn_id else None


def label_id(txn_id: str | None, card_id: str | None, label: int, reported_at_ms: int,
             source: str) -> str:
    """Deterministic id of a label: 32 hex of sha256 over its content and a scheme version."""
    encoded = orjson.dumps([LABEL_SCHEME, txn_id, card_id, label, reported_at_ms, source])
    return hashlib.sha256(encoded).hexdigest()[:32]


def parse_label_row(row: Any, *, now_ms: int, default_source: str = "import") -> LabelRecord:
    """One input row (a decoded JSON object or a Parquet row as a dict): `txn_id` and/or
    `card_id`, `label` (0, 1, true, false), `reported_at` (ms since epoch, or an ISO 8601 time
    with a UTC offset; `label_ts_ms`, as `generate --labels` writes it, is taken for it),
    optional `source`, optional `merchant_id` and `ts_ms` (the labelled transaction's merchant
    and event time: they feed the merchant features). Raises LabelError naming the field."""
    if not isinstance(row, dict):
        raise LabelError(None, "row: must be a JSON object")
    present = {k: v for k, v in row.items() if v is not None}  # Parquet nulls: absent
    for name in present:
        if name not in _ALLOWED:
            raise LabelError(name, f"{name}: unknown field (allowed: {', '.join(_ALLOWED)})")
    ids = {}
    for name in ("txn_id", "card_id", "merchant_id"):
        value = present.get(name)
        if value is not None and (type(value) is not str or not ID_RE.fullmatch(value)):
            raise LabelError(name, f"{name}: must be {ID_RULE}")
        ids[name] = value
    if ids["txn_id"] is None and ids["card_id"] is None:
        raise LabelError("txn_id", "txn_id: required when card_id is absent (give one or both)")
    if "label" not in present:
        raise LabelError("label", "label: required, 0 or 1 (1: fraud)")
    label = present["label"]
    if type(label) is bool:
        label = int(label)
    if type(label) is not int or label not in (0, 1):
        raise LabelError("label", f"label: must be 0, 1, true or false, got {label!r}")
    if "reported_at" in present and "label_ts_ms" in present:
        raise LabelError("label_ts_ms", "label_ts_ms: give reported_at or label_ts_ms, not both")
    if "label_ts_ms" in present:  # the name `fraudstream generate --labels` writes
        if type(present["label_ts_ms"]) is not int:
            raise LabelError("label_ts_ms", "label_ts_ms: must be ms since epoch (integer)")
        present["reported_at"] = present["label_ts_ms"]
    if "reported_at" not in present:
        raise LabelError("reported_at", "reported_at: required (ms since epoch or ISO 8601)")
    reported = _reported_at_ms(present["reported_at"])
    if not MIN_TS_MS <= reported <= now_ms + _FUTURE_SLACK_MS:
        raise LabelError("reported_at", "reported_at: must lie between 2000-01-01 and a day "
                         "from now")
    source = present.get("source", default_source)
    if type(source) is not str or not ID_RE.fullmatch(source):
        raise LabelError("source", f"source: must be {ID_RULE}")
    txn_ts = present.get("ts_ms")
    if txn_ts is not None and (type(txn_ts) is not int or not MIN_TS_MS <= txn_ts <= reported):
        raise LabelError("ts_ms", "ts_ms: the transaction's event time, ms since epoch, at or "
                         "before reported_at")
    return LabelRecord(label_id(ids["txn_id"], ids["card_id"], label, reported, source),
                       ids["txn_id"], ids["card_id"], label, reported, source,
                       merchant_id=ids["merchant_id"], txn_ts_ms=txn_ts)


def _reported_at_ms(value: Any) -> int:
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise LabelError("reported_at", "reported_at: not an ISO 8601 time") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise LabelError("reported_at", "reported_at: needs a UTC offset (e.g. Z, +00:00)")
        return (value - _EPOCH) // timedelta(milliseconds=1)
    raise LabelError("reported_at", "reported_at: must be ms since epoch (integer) or ISO 8601")
