"""The bad-message corpus: named kinds of broken messages with the rejection each must get."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson

from app.transactions.contract import (
    DEFAULT_MAX_BYTES,
    MAX_AMOUNT_MINOR,
    MAX_FUTURE_MS,
    MIN_TS_MS,
    ReasonCode,
)

#: Bytes a line reader could take for a line break; no bad message contains any of them.
LINE_BREAK_BYTES: Final = frozenset(b"\n\r\x0b\x0c\x1c\x1d\x1e\x85")
DAY_MS: Final = 86_400_000
_PLACEHOLDER: Final = "\x00raw\x00"


@dataclass(frozen=True, slots=True)
class CorpusContext:
    """What a bad message is built against: the validator's clock and size limit."""

    now_ms: int
    max_bytes: int = DEFAULT_MAX_BYTES


Builder = Callable[[dict[str, Any], np.random.Generator, CorpusContext], bytes]


@dataclass(frozen=True, slots=True)
class BadMessageKind:
    """One way a message can break the contract, and the rejection the validator must give."""

    name: str
    code: ReasonCode
    field: str | None
    build: Builder
    description: str


@dataclass(frozen=True, slots=True)
class BadMessage:
    """One built bad message: its raw bytes and the rejection expected for it."""

    kind: str
    raw: bytes
    code: ReasonCode
    field: str | None


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _with(**changes: Any) -> Builder:
    return lambda base, rng, ctx: _dumps({**base, **changes})


def _without(field: str) -> Builder:
    return lambda base, rng, ctx: _dumps({k: v for k, v in base.items() if k != field})


def _raw_value(field: str, raw: bytes) -> Builder:
    """A value JSON encoders refuse to write (NaN, Infinity, 1e400), spliced in as bytes."""
    def build(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
        text = _dumps({**base, field: _PLACEHOLDER})
        return text.replace(_dumps(_PLACEHOLDER), raw)
    return build


def _pick(*options: Any) -> Callable[[np.random.Generator], Any]:
    return lambda rng: options[int(rng.integers(0, len(options)))]


def _varied(field: str, choose: Callable[[np.random.Generator], Any]) -> Builder:
    return lambda base, rng, ctx: _dumps({**base, field: choose(rng)})


def _invalid_utf8(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    # A lone continuation byte, an overlong '/', a cut 3-byte sequence, or a byte UTF-8 never uses.
    bad = _pick(b"\x80", b"\xc0\xaf", b"\xe2\x82", b"\xff", b"\xfe")(rng)
    return _raw_value("merchant_id", b'"' + bad + b'"')(base, rng, ctx)


def _truncated(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    whole = _dumps(base)
    return whole[: int(rng.integers(1, len(whole)))]


def _not_json(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    return ";".join(f"{k}={v}" for k, v in base.items()).encode()


def _utf16(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    return _dumps(base).decode().encode("utf-16-le")


def _padded(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    whole = _dumps(base)
    extra = int(rng.integers(1, 512))
    return whole + b" " * (ctx.max_bytes - len(whole) + extra)


def _long_unknown(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    return _dumps({**base, "memo": "x" * (ctx.max_bytes + int(rng.integers(1, 512)))})


def _future(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    return _dumps({**base, "ts_ms": ctx.now_ms + 2 * DAY_MS + int(rng.integers(0, DAY_MS))})


def _just_past_limit(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    return _dumps({**base, "ts_ms": ctx.now_ms + MAX_FUTURE_MS + 1})


def _ts_float(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    return _dumps({**base, "ts_ms": base["ts_ms"] + 0.5})


def _ts_seconds(base: dict[str, Any], rng: np.random.Generator, ctx: CorpusContext) -> bytes:
    return _dumps({**base, "ts_ms": base["ts_ms"] // 1000})


_EMOJI: Final = "\U0001f4b3"

KINDS: Final[tuple[BadMessageKind, ...]] = (
    BadMessageKind("invalid_utf8", "invalid_utf8", None, _invalid_utf8,
                   "bytes that are not UTF-8 inside a string"),
    BadMessageKind("utf16_json", "invalid_json", None, _utf16,
                   "the JSON text encoded as UTF-16 (valid UTF-8 bytes, NUL every other byte)"),
    BadMessageKind("not_json", "invalid_json", None, _not_json, "key=value text, not JSON"),
    BadMessageKind("truncated_json", "invalid_json", None, _truncated,
                   "a JSON object cut short"),
    BadMessageKind("trailing_garbage", "invalid_json", None,
                   lambda base, rng, ctx: _dumps(base) + b"}", "an object followed by a '}'"),
    BadMessageKind("byte_order_mark", "invalid_json", None,
                   lambda base, rng, ctx: b"\xef\xbb\xbf" + _dumps(base), "a UTF-8 BOM first"),
    BadMessageKind("empty_message", "invalid_json", None, lambda base, rng, ctx: b"",
                   "zero bytes"),
    BadMessageKind("whitespace_only", "invalid_json", None,
                   lambda base, rng, ctx: b" " * int(rng.integers(1, 8)), "only spaces"),
    BadMessageKind("json_array", "not_object", None,
                   lambda base, rng, ctx: _dumps(list(base.values())), "a JSON array"),
    BadMessageKind("json_string", "not_object", None,
                   lambda base, rng, ctx: _dumps(_dumps(base).decode()), "a JSON string"),
    BadMessageKind("json_number", "not_object", None,
                   lambda base, rng, ctx: _dumps(base["amount_minor"]), "a JSON number"),
    BadMessageKind("json_null", "not_object", None, lambda base, rng, ctx: b"null",
                   "JSON null"),
    BadMessageKind("missing_txn_id", "missing_field", "txn_id", _without("txn_id"),
                   "no txn_id"),
    BadMessageKind("missing_ts_ms", "missing_field", "ts_ms", _without("ts_ms"), "no ts_ms"),
    BadMessageKind("missing_amount", "missing_field", "amount_minor", _without("amount_minor"),
                   "no amount_minor"),
    BadMessageKind("missing_channel", "missing_field", "channel", _without("channel"),
                   "no channel"),
    BadMessageKind("unknown_field", "unknown_field", "merchant_name",
                   _with(merchant_name="Corner Shop"), "an extra field"),
    BadMessageKind("null_amount", "wrong_type", "amount_minor", _with(amount_minor=None),
                   "amount_minor is null"),
    BadMessageKind("null_currency", "wrong_type", "currency", _with(currency=None),
                   "currency is null"),
    BadMessageKind("string_amount", "wrong_type", "amount_minor",
                   lambda base, rng, ctx: _dumps(
                       {**base, "amount_minor": str(base["amount_minor"])}),
                   "amount_minor as a string"),
    BadMessageKind("float_amount", "wrong_type", "amount_minor",
                   _varied("amount_minor", _pick(12.5, 0.99, 1234.56)), "a fractional amount"),
    BadMessageKind("integral_float_amount", "wrong_type", "amount_minor",
                   _varied("amount_minor", _pick(100.0, 1.0, 2500.0)),
                   "an integral amount written as a float"),
    BadMessageKind("nan_amount", "invalid_json", None, _raw_value("amount_minor", b"NaN"),
                   "the NaN literal (not JSON)"),
    BadMessageKind("infinity_amount", "invalid_json", None,
                   lambda base, rng, ctx: _raw_value(
                       "amount_minor", _pick(b"Infinity", b"-Infinity")(rng))(base, rng, ctx),
                   "the Infinity literal (not JSON)"),
    BadMessageKind("overflowing_amount", "invalid_json", None,
                   _raw_value("amount_minor", b"1e400"), "a number beyond double range"),
    BadMessageKind("negative_amount", "out_of_range", "amount_minor",
                   _varied("amount_minor", lambda rng: -int(rng.integers(1, 100_000))),
                   "a negative amount"),
    BadMessageKind("zero_amount", "out_of_range", "amount_minor", _with(amount_minor=0),
                   "a zero amount"),
    BadMessageKind("huge_amount", "out_of_range", "amount_minor",
                   _varied("amount_minor",
                           lambda rng: MAX_AMOUNT_MINOR + 1 + int(rng.integers(0, 10**15))),
                   "an amount above 10^12"),
    BadMessageKind("boolean_amount", "wrong_type", "amount_minor",
                   _varied("amount_minor", _pick(True, False)), "true/false as the amount"),
    BadMessageKind("object_amount", "wrong_type", "amount_minor",
                   lambda base, rng, ctx: _dumps(
                       {**base, "amount_minor": {"value": base["amount_minor"]}}),
                   "the amount as a nested object"),
    BadMessageKind("lowercase_currency", "bad_format", "currency",
                   lambda base, rng, ctx: _dumps({**base, "currency": base["currency"].lower()}),
                   "currency in lower case"),
    BadMessageKind("four_letter_currency", "bad_format", "currency",
                   _varied("currency", _pick("USDT", "EURO", "GBPX")), "a 4-letter currency"),
    BadMessageKind("numeric_currency", "wrong_type", "currency",
                   _varied("currency", _pick(840, 978, 826)), "an ISO 4217 numeric code"),
    BadMessageKind("bad_country", "bad_format", "country",
                   _varied("country", _pick("USA", "us", "U1", "", "GBR")),
                   "an alpha-3, lower-case or malformed country"),
    BadMessageKind("bad_channel", "bad_format", "channel",
                   _varied("channel", _pick("POS", "moto", "online", "")), "an unknown channel"),
    BadMessageKind("numeric_channel", "wrong_type", "channel", _with(channel=1),
                   "a channel number"),
    BadMessageKind("txn_id_too_long", "bad_format", "txn_id",
                   lambda base, rng, ctx: _dumps({**base, "txn_id": (base["txn_id"] * 65)[:65]}),
                   "a 65-character txn_id"),
    BadMessageKind("txn_id_with_space", "bad_format", "txn_id",
                   lambda base, rng, ctx: _dumps({**base, "txn_id": base["txn_id"] + " 1"}),
                   "a space in txn_id"),
    BadMessageKind("merchant_id_with_slash", "bad_format", "merchant_id",
                   lambda base, rng, ctx: _dumps(
                       {**base, "merchant_id": "acq/" + base["merchant_id"]}),
                   "a slash in merchant_id"),
    BadMessageKind("card_id_with_emoji", "bad_format", "card_id",
                   lambda base, rng, ctx: _dumps({**base, "card_id": base["card_id"] + _EMOJI}),
                   "an emoji in card_id"),
    BadMessageKind("empty_txn_id", "bad_format", "txn_id", _with(txn_id=""), "an empty txn_id"),
    BadMessageKind("numeric_card_id", "wrong_type", "card_id",
                   _varied("card_id", lambda rng: int(rng.integers(1, 10**9))),
                   "card_id as a number"),
    BadMessageKind("far_future_ts", "out_of_range", "ts_ms", _future,
                   "an event time two or more days after now"),
    BadMessageKind("ts_just_past_limit", "out_of_range", "ts_ms", _just_past_limit,
                   "an event time 1 ms past now + 1 day"),
    BadMessageKind("pre_2000_ts", "out_of_range", "ts_ms",
                   _varied("ts_ms", lambda rng: MIN_TS_MS - 1 - int(rng.integers(0, 10**11))),
                   "an event time before 2000-01-01"),
    BadMessageKind("ts_in_seconds", "out_of_range", "ts_ms", _ts_seconds,
                   "seconds where milliseconds are due"),
    BadMessageKind("float_ts", "wrong_type", "ts_ms", _ts_float, "a fractional event time"),
    BadMessageKind("iso_ts", "wrong_type", "ts_ms", _with(ts_ms="2026-01-01T00:00:00Z"),
                   "an ISO-8601 string event time"),
    BadMessageKind("mcc_out_of_range", "out_of_range", "mcc",
                   _varied("mcc", _pick(10_000, 99_999, -1)), "an MCC outside 0..9999"),
    BadMessageKind("string_mcc", "wrong_type", "mcc",
                   lambda base, rng, ctx: _dumps({**base, "mcc": f"{base['mcc']:04d}"}),
                   "the MCC as a string"),
    BadMessageKind("oversized_padding", "too_large", None, _padded,
                   "a valid object padded with spaces past the size limit"),
    BadMessageKind("oversized_unknown_field", "too_large", None, _long_unknown,
                   "an object with a huge unknown field, past the size limit"),
)

KINDS_BY_NAME: Final[Mapping[str, BadMessageKind]] = {k.name: k for k in KINDS}


def build_bad_message(
    kind: BadMessageKind | str, base: dict[str, Any], rng: np.random.Generator,
    ctx: CorpusContext,
) -> BadMessage:
    """Build one bad message of `kind` from a valid transaction dict `base`."""
    spec = KINDS_BY_NAME[kind] if isinstance(kind, str) else kind
    raw = spec.build(base, rng, ctx)
    if LINE_BREAK_BYTES.intersection(raw):
        raise RuntimeError(f"bad message kind {spec.name} produced a line-break byte")
    return BadMessage(spec.name, raw, spec.code, spec.field)


def sample_base(ident: str, *, now_ms: int) -> dict[str, Any]:
    """A valid transaction dict (in contract field order) to break: for tests and examples."""
    return {
        "txn_id": ident,
        "card_id": "c0000001",
        "ts_ms": now_ms - DAY_MS,
        "amount_minor": 1250,
        "currency": "EUR",
        "merchant_id": "m0000001",
        "mcc": 5411,
        "country": "DE",
        "channel": "pos",
    }
