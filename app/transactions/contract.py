"""The transaction contract: the Transaction record and the pure validator that enforces it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

import msgspec
import orjson

from app.errors import FieldErrorCode
from app.ids import ID_RE, ID_RULE

Channel = Literal["pos", "ecom", "atm"]
CHANNELS: Final = frozenset(("pos", "ecom", "atm"))

#: 2000-01-01T00:00:00Z in ms since epoch: the earliest event time accepted.
MIN_TS_MS: Final = 946_684_800_000
#: Event times may be at most this far ahead of the validator's clock.
MAX_FUTURE_MS: Final = 86_400_000
MAX_AMOUNT_MINOR: Final = 10**12
DEFAULT_MAX_BYTES: Final = 8192

_CURRENCY_RE: Final = re.compile(r"[A-Z]{3}")
_COUNTRY_RE: Final = re.compile(r"[A-Z]{2}")

#: Reason codes used in DLQ headers and as the metric label; stable, low cardinality.
ReasonCode = Literal["too_large", "invalid_utf8", FieldErrorCode]


class Transaction(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One card transaction as the transaction contract defines it (docs/contract.md).

    Decoding JSON straight into it (`parse_transaction`'s fast path) checks in C what the type
    says: every field present, nothing unknown, strict integers in their static ranges, the
    channel. The rest of the contract is checked after (see `parse_transaction`).
    """

    txn_id: str
    card_id: str
    ts_ms: Annotated[int, msgspec.Meta(ge=MIN_TS_MS)]
    amount_minor: Annotated[int, msgspec.Meta(ge=1, le=MAX_AMOUNT_MINOR)]
    currency: str
    merchant_id: str
    mcc: Annotated[int, msgspec.Meta(ge=0, le=9999)]
    country: str
    channel: Channel

    def to_dict(self) -> dict[str, Any]:
        """Plain dict in field order (JSON-ready)."""
        return msgspec.structs.asdict(self)

    def to_json(self) -> bytes:
        """Canonical JSON bytes of this transaction."""
        return orjson.dumps(self.to_dict())


FIELDS: Final = Transaction.__struct_fields__
_FIELD_SET: Final = frozenset(FIELDS)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a message broke the contract: a stable code, the field (if any) and a readable reason."""

    code: ReasonCode
    field: str | None
    reason: str


class ContractError(ValueError):
    """Raised by `parse_transaction` when a message breaks the contract."""

    def __init__(self, rejection: Rejection) -> None:
        super().__init__(rejection.reason)
        self.rejection = rejection


def _reject(code: ReasonCode, field: str | None, reason: str) -> ContractError:
    return ContractError(Rejection(code, field, reason))


def _is_int(value: Any) -> bool:
    # bool is an int subclass in Python; JSON true/false is never a number here.
    return type(value) is int


def _check_id(obj: dict[str, Any], name: str) -> str:
    value = obj[name]
    if type(value) is not str:
        raise _reject("wrong_type", name, f"{name}: must be a string, got {_json_type(value)}")
    if not ID_RE.fullmatch(value):
        raise _reject(
            "bad_format", name, f"{name}: must be {ID_RULE}"
        )
    return value


def _check_int(obj: dict[str, Any], name: str, lo: int, hi: int) -> int:
    value = obj[name]
    if not _is_int(value):
        raise _reject("wrong_type", name, f"{name}: must be an integer, got {_json_type(value)}")
    if not lo <= value <= hi:
        # bounded text: Python refuses str() of ints over 4300 digits
        shown = value if abs(value) < 10**30 else ("a huge integer" if value > 0 else "a huge negative integer")
        raise _reject("out_of_range", name, f"{name}: {shown} is outside [{lo}, {hi}]")
    return value


def _check_code(obj: dict[str, Any], name: str, pattern: re.Pattern[str], what: str) -> str:
    value = obj[name]
    if type(value) is not str:
        raise _reject("wrong_type", name, f"{name}: must be a string, got {_json_type(value)}")
    if not pattern.fullmatch(value):
        raise _reject("bad_format", name, f"{name}: must be {what}, got {value[:16]!r}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, float):
        return "float"
    return {int: "integer", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def validate_object(obj: Any, *, now_ms: int) -> Transaction:
    """Check an already-decoded JSON value against the contract; raise ContractError if broken."""
    if not isinstance(obj, dict):
        raise _reject("not_object", None, f"message must be a JSON object, got {_json_type(obj)}")
    for name in FIELDS:
        if name not in obj:
            raise _reject("missing_field", name, f"{name}: required field is missing")
    for name in obj:
        if name not in _FIELD_SET:
            raise _reject("unknown_field", str(name)[:64], f"{str(name)[:64]}: unknown field")
    txn_id = _check_id(obj, "txn_id")
    card_id = _check_id(obj, "card_id")
    merchant_id = _check_id(obj, "merchant_id")
    ts_ms = _check_int(obj, "ts_ms", MIN_TS_MS, now_ms + MAX_FUTURE_MS)
    amount = _check_int(obj, "amount_minor", 1, MAX_AMOUNT_MINOR)
    mcc = _check_int(obj, "mcc", 0, 9999)
    currency = _check_code(obj, "currency", _CURRENCY_RE, "an ISO 4217 code (3 upper-case letters)")
    country = _check_code(obj, "country", _COUNTRY_RE, "an ISO 3166-1 alpha-2 code")
    channel = obj["channel"]
    if type(channel) is not str:
        raise _reject("wrong_type", "channel", f"channel: must be a string, got {_json_type(channel)}")
    if channel not in CHANNELS:
        raise _reject("bad_format", "channel", "channel: must be one of pos, ecom, atm")
    return Transaction(txn_id, card_id, ts_ms, amount, currency, merchant_id, mcc, country, channel)


_decode: Final = msgspec.json.Decoder(Transaction).decode
#: The five string fields joined by NUL, checked in one regex call with the validator's own
#: patterns (none admits a NUL, so a NUL inside a field adds a separator and cannot match).
_STRINGS_RE: Final = re.compile("\x00".join(
    p.pattern for p in (ID_RE, ID_RE, ID_RE, _CURRENCY_RE, _COUNTRY_RE)))


def _strings_match(txn_id: str, card_id: str, merchant_id: str, currency: str,
                   country: str) -> bool:
    """`_STRINGS_RE` over the five (what the compiled `strings_ok` answers)."""
    return _STRINGS_RE.fullmatch(
        f"{txn_id}\x00{card_id}\x00{merchant_id}\x00{currency}\x00{country}") is not None


try:
    from app.transactions._contract import strings_ok as _strings_ok
except ImportError:  # pragma: no cover - exercised only where the extension was not built
    _strings_ok = _strings_match


def parse_transaction(raw: bytes, *, now_ms: int, max_bytes: int = DEFAULT_MAX_BYTES) -> Transaction:
    """Decode and validate one message's bytes; raise ContractError naming what is wrong."""
    if len(raw) > max_bytes:
        raise _reject("too_large", None, f"message is {len(raw)} bytes, limit is {max_bytes}")
    # The fast path accepts a subset of what `parse_checked` accepts (same record); anything
    # it refuses goes to `parse_checked`, which alone names the rejection.
    try:
        txn = _decode(raw)
    except (msgspec.MsgspecError, ValueError, RecursionError):  # UnicodeDecodeError included
        return parse_checked(raw, now_ms=now_ms)
    if txn.ts_ms > now_ms + MAX_FUTURE_MS or not _strings_ok(
            txn.txn_id, txn.card_id, txn.merchant_id, txn.currency, txn.country):
        return parse_checked(raw, now_ms=now_ms)
    return txn


def parse_checked(raw: bytes, *, now_ms: int) -> Transaction:
    """`parse_transaction` in Python, check by check: what names the reason of a rejection."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _reject("invalid_utf8", None, f"message is not UTF-8 (byte {exc.start})") from None
    try:
        # orjson rejects NaN/Infinity and lone surrogates, which the contract forbids too.
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise _reject("invalid_json", None, f"message is not valid JSON: {exc}") from None
    if isinstance(obj, dict):
        _reject_float_specials(obj)
    return validate_object(obj, now_ms=now_ms)


def _reject_float_specials(obj: dict[str, Any]) -> None:
    for name, value in obj.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise _reject("wrong_type", str(name)[:64], f"{name}: non-finite number")
