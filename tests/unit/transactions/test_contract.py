"""The transaction contract against the bad-message corpus, edge values and arbitrary input."""

from __future__ import annotations

import json
from typing import Any, get_args

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.datagen.config import GeneratorConfig
from app.datagen.generator import generate_log
from app.datagen.malformed import KINDS, CorpusContext, build_bad_message, sample_base
from app.transactions.contract import (
    DEFAULT_MAX_BYTES,
    FIELDS,
    MAX_AMOUNT_MINOR,
    MAX_FUTURE_MS,
    MIN_TS_MS,
    ContractError,
    ReasonCode,
    Transaction,
    parse_checked,
    parse_transaction,
    validate_object,
)

NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CTX = CorpusContext(now_ms=NOW_MS)


def _valid(**changes: Any) -> dict[str, Any]:
    return {**sample_base("t-1", now_ms=NOW_MS), **changes}


def _rejection(raw: bytes) -> tuple[str, str | None]:
    with pytest.raises(ContractError) as info:
        parse_transaction(raw, now_ms=NOW_MS)
    return info.value.rejection.code, info.value.rejection.field


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_corpus_kind_is_rejected_with_its_code_and_field(kind: Any) -> None:
    for seed in range(4):  # the rng varies the bytes of some kinds
        bad = build_bad_message(kind, _valid(), np.random.default_rng(seed), CTX)
        assert _rejection(bad.raw) == (kind.code, kind.field), bad.raw[:120]


def test_corpus_reaches_every_reason_code() -> None:
    assert {k.code for k in KINDS} == set(get_args(ReasonCode))
    assert len(KINDS) >= 22


def test_generated_transactions_pass_and_are_canonical() -> None:
    config = GeneratorConfig(cards=50, txns=600, seed=3, redelivery=0.05, out_of_order=0.05)
    log = generate_log(config)
    seen = 0
    for line, kind in log.iter_lines():
        txn = parse_transaction(line, now_ms=config.validation_now_ms)
        assert kind in ("valid", "redelivery")
        assert txn.to_json() == line  # the generator writes the canonical form
        seen += 1
    assert seen == len(log) == 630


@pytest.mark.parametrize(
    "changes",
    [
        {"amount_minor": 1},
        {"amount_minor": MAX_AMOUNT_MINOR},
        {"mcc": 0},
        {"mcc": 9999},
        {"ts_ms": MIN_TS_MS},
        {"ts_ms": NOW_MS + MAX_FUTURE_MS},
        {"txn_id": "T" * 64, "card_id": "c" * 64, "merchant_id": "a.b:c_d-" * 8},
        {"txn_id": "x"},
        {"channel": "atm"},
        {"channel": "ecom"},
    ],
    ids=lambda c: ",".join(f"{k}={str(v)[:12]}" for k, v in c.items()),
)
def test_edge_values_pass(changes: dict[str, Any]) -> None:
    txn = parse_transaction(orjson.dumps(_valid(**changes)), now_ms=NOW_MS)
    for name, value in changes.items():
        assert getattr(txn, name) == value


@pytest.mark.parametrize(
    ("changes", "code", "field"),
    [
        ({"amount_minor": MAX_AMOUNT_MINOR + 1}, "out_of_range", "amount_minor"),
        ({"mcc": 10_000}, "out_of_range", "mcc"),
        ({"mcc": -1}, "out_of_range", "mcc"),
        ({"ts_ms": MIN_TS_MS - 1}, "out_of_range", "ts_ms"),
        ({"ts_ms": NOW_MS + MAX_FUTURE_MS + 1}, "out_of_range", "ts_ms"),
        ({"card_id": "c" * 65}, "bad_format", "card_id"),
        ({"merchant_id": "m" * 65}, "bad_format", "merchant_id"),
    ],
)
def test_one_past_each_edge_fails(changes: dict[str, Any], code: str, field: str) -> None:
    assert _rejection(orjson.dumps(_valid(**changes))) == (code, field)


def test_size_limit_is_inclusive_and_checked_first() -> None:
    raw = orjson.dumps(_valid())
    exact = raw + b" " * (DEFAULT_MAX_BYTES - len(raw))
    assert parse_transaction(exact, now_ms=NOW_MS).txn_id == "t-1"
    assert _rejection(exact + b" ") == ("too_large", None)
    # a huge bad id is reported as too large: size is the first rule
    assert _rejection(orjson.dumps(_valid(merchant_id="m" * 9000))) == ("too_large", None)


@pytest.mark.parametrize("name", ["amount_minor", "ts_ms", "mcc"])
@pytest.mark.parametrize("value", [True, False])
def test_boolean_is_not_an_integer(name: str, value: bool) -> None:
    assert _rejection(orjson.dumps(_valid(**{name: value}))) == ("wrong_type", name)
    with pytest.raises(ContractError) as info:
        validate_object(_valid(**{name: value}), now_ms=NOW_MS)
    assert info.value.rejection.code == "wrong_type"


def test_non_finite_floats_are_wrong_type_when_already_decoded() -> None:
    for value in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ContractError) as info:
            validate_object(_valid(amount_minor=value), now_ms=NOW_MS)
        assert (info.value.rejection.code, info.value.rejection.field) == (
            "wrong_type", "amount_minor")


def test_valid_object_round_trips_to_the_record() -> None:
    txn = validate_object(_valid(), now_ms=NOW_MS)
    assert txn == Transaction(**_valid())
    assert tuple(txn.to_dict()) == FIELDS


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)
_near_valid = st.builds(
    lambda base, drop, extra, replace: {
        **{k: v for k, v in base.items() if k not in drop}, **extra, **replace
    },
    st.just(_valid()),
    st.sets(st.sampled_from(FIELDS), max_size=2),
    st.dictionaries(st.text(max_size=10), _json, max_size=2),
    st.dictionaries(st.sampled_from(FIELDS), _json, max_size=3),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_near_valid | st.dictionaries(st.text(max_size=16), _json, max_size=12) | _json)
def test_validate_object_raises_only_contract_errors(obj: Any) -> None:
    try:
        txn = validate_object(obj, now_ms=NOW_MS)
    except ContractError as exc:
        assert exc.rejection.code in get_args(ReasonCode)
    else:
        assert isinstance(txn, Transaction)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=300))
def test_parse_transaction_raises_only_contract_errors_on_any_bytes(raw: bytes) -> None:
    with pytest.raises(ContractError):
        parse_transaction(raw, now_ms=NOW_MS)


@pytest.mark.parametrize("literal", [b"18446744073709551616", b"-9223372036854775809"])
def test_integer_literals_beyond_64_bits_are_rejected(literal: bytes) -> None:
    # orjson decodes these as floats, so the rejection is wrong_type rather than out_of_range
    raw = orjson.dumps(_valid(amount_minor=0)).replace(
        b'"amount_minor":0', b'"amount_minor":' + literal
    )
    assert _rejection(raw) == ("wrong_type", "amount_minor")


def test_huge_integer_is_rejected_as_out_of_range() -> None:
    with pytest.raises(ContractError) as info:
        validate_object(_valid(amount_minor=10**5000), now_ms=NOW_MS)
    assert info.value.rejection.code == "out_of_range"


_string_edit = st.text(alphabet=st.sampled_from("AZaz09_.:-\n\r \t\x00\u00e9\u0660\ud800\"\\"),
                       max_size=66)
_field_edit = st.sampled_from(FIELDS).flatmap(lambda name: st.tuples(st.just(name), st.one_of(
    _string_edit, st.integers(min_value=-2, max_value=2**64), st.booleans(), st.floats(),
    st.none(), st.sampled_from(["pos", "ecom", "atm", "POS", "pos\n", "USD", "US", "DE\n", "t\n"]),
    st.just(NOW_MS + MAX_FUTURE_MS), st.just(NOW_MS + MAX_FUTURE_MS + 1))))


def _as_bytes(obj: dict[str, Any], *, spaced: bool, duplicate: str | None, ascii_only: bool
              ) -> bytes:
    # the standard library writes what orjson cannot: huge ints, NaN, lone surrogates (escaped)
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=ascii_only)
    if duplicate is not None and duplicate in obj:  # the key twice: JSON's last value wins
        text = text[:-1] + "," + json.dumps({duplicate: "dup"})[1:-1] + "}"
    if spaced:
        text = text.replace(",", " ,\n ")
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=600, deadline=None)
@given(edits=st.lists(_field_edit, max_size=3), drop=st.sets(st.sampled_from(FIELDS), max_size=1),
       spaced=st.booleans(), duplicate=st.none() | st.sampled_from(FIELDS),
       ascii_only=st.booleans())
def test_fast_path_agrees_with_the_python_validator(
        edits: list[tuple[str, Any]], drop: set[str], spaced: bool, duplicate: str | None,
        ascii_only: bool) -> None:
    obj = {k: v for k, v in _valid(**dict(edits)).items() if k not in drop}
    raw = _as_bytes(obj, spaced=spaced, duplicate=duplicate, ascii_only=ascii_only)
    outcomes = []
    for parse in (parse_transaction, parse_checked):
        try:
            outcomes.append(parse(raw, now_ms=NOW_MS))
        except ContractError as exc:
            outcomes.append(exc.rejection)
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("raw", [
    b'{"txn_id":"t\\ud800"}',
    b'\xef\xbb\xbf' + orjson.dumps(_valid()),
    orjson.dumps(_valid(currency="USD\n")),
    orjson.dumps(_valid(country="DE\n")),
    orjson.dumps(_valid(merchant_id="m-1\n")),
    orjson.dumps(_valid(card_id="c\x00d")),
    orjson.dumps(_valid(mcc=1.0)),
    orjson.dumps(_valid()).replace(b'"channel":"pos"', b'"channel":"pos","channel":"bus"'),
])
def test_fast_path_leaves_each_rejection_to_the_python_validator(raw: bytes) -> None:
    with pytest.raises(ContractError) as fast:
        parse_transaction(raw, now_ms=NOW_MS)
    with pytest.raises(ContractError) as checked:
        parse_checked(raw, now_ms=NOW_MS)
    assert fast.value.rejection == checked.value.rejection


_id_text = st.text(alphabet=st.sampled_from("aZ09_.:-\x00\"é ÿ€\U0001f600Ab"), max_size=70)


@settings(max_examples=400, deadline=None)
@given(strings=st.tuples(_id_text, _id_text, _id_text,
                         st.text(alphabet="ABZaz1\x00É", max_size=4),
                         st.text(alphabet="ABZaz1\x00É", max_size=3)))
def test_the_compiled_string_rules_are_the_regex(strings: tuple[str, ...]) -> None:
    """The compiled check (app/transactions/_contract.c) answers what the joined regex does,
    lengths, NUL, non-ASCII and lower-case codes included."""
    from app.transactions import _contract
    from app.transactions.contract import _strings_match

    assert _contract.strings_ok(*strings) is _strings_match(*strings)


def test_the_compiled_string_rules_at_their_edges() -> None:
    from app.transactions._contract import strings_ok

    assert strings_ok("a" * 64, "B", "0_.:-", "EUR", "FR")
    assert not strings_ok("a" * 65, "B", "m", "EUR", "FR")
    assert not strings_ok("", "B", "m", "EUR", "FR")
    assert not strings_ok("t", "B", "m", "EU", "FR")
    assert not strings_ok("t", "B", "m", "EUR", "Fr")
    assert not strings_ok("t", "B", "m", "EURO", "FR")
    assert not strings_ok("t", b"B", "m", "EUR", "FR")  # not a str
    with pytest.raises(TypeError):
        strings_ok("t", "B", "m", "EUR")
