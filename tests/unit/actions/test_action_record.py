"""The Action record: canonical JSON round trip and strict parsing that names the field."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.actions import Action, ActionError, idempotency_key, make_action
from app.actions.action import FIELDS, MAX_TS_MS
from app.transactions.contract import MIN_TS_MS

TS = 1_718_000_000_000


def _valid(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "idempotency_key": idempotency_key("freeze_card", "txn-1"),
        "type": "freeze_card",
        "card_id": "card-1",
        "txn_id": "txn-1",
        "ts_ms": TS,
        "score": 0.97,
        "model_version": "gbt-2024.06 (r3)",
        "decided_at_ms": TS + 40,
    }
    body.update(changes)
    return body


def test_fields_are_exactly_the_contract_in_order():
    assert FIELDS == (
        "idempotency_key",
        "type",
        "card_id",
        "txn_id",
        "ts_ms",
        "score",
        "model_version",
        "decided_at_ms",
    )


def test_round_trip_is_lossless_and_canonical():
    action = Action.from_json(orjson.dumps(_valid()))
    assert action.score == 0.97
    assert Action.from_json(action.to_json()) == action
    assert list(orjson.loads(action.to_json())) == [*FIELDS, "decided_by"]


def test_integer_score_is_accepted_as_float():
    action = Action.from_dict(_valid(score=1))
    assert action.score == 1.0
    assert type(action.score) is float


def test_make_action_derives_the_key():
    action = make_action(
        "alert_customer",
        card_id="c",
        txn_id="t",
        ts_ms=TS,
        score=0.5,
        model_version="m",
        decided_at_ms=TS,
    )
    assert action.idempotency_key == idempotency_key("alert_customer", "t")


def test_action_is_frozen():
    action = Action.from_dict(_valid())
    with pytest.raises(AttributeError):
        action.score = 0.1  # type: ignore[misc]


@pytest.mark.parametrize("name", FIELDS)
def test_missing_field_is_named(name):
    body = _valid()
    del body[name]
    with pytest.raises(ActionError) as info:
        Action.from_dict(body)
    assert (info.value.code, info.value.field) == ("missing_field", name)
    assert name in str(info.value)


@pytest.mark.parametrize(
    ("changes", "field", "code"),
    [
        ({"type": "block_card"}, "type", "bad_format"),
        ({"type": 1}, "type", "wrong_type"),
        ({"card_id": ""}, "card_id", "bad_format"),
        ({"card_id": "x" * 65}, "card_id", "bad_format"),
        ({"card_id": "a b"}, "card_id", "bad_format"),
        ({"card_id": 7}, "card_id", "wrong_type"),
        ({"txn_id": None}, "txn_id", "wrong_type"),
        ({"idempotency_key": "A" * 32}, "idempotency_key", "bad_format"),
        ({"idempotency_key": "0" * 32}, "idempotency_key", "key_mismatch"),
        ({"ts_ms": "1718000000000"}, "ts_ms", "wrong_type"),
        ({"ts_ms": float(TS)}, "ts_ms", "wrong_type"),
        ({"ts_ms": True}, "ts_ms", "wrong_type"),
        ({"ts_ms": MIN_TS_MS - 1}, "ts_ms", "out_of_range"),
        ({"ts_ms": MAX_TS_MS + 1}, "ts_ms", "out_of_range"),
        ({"ts_ms": TS * 1000}, "ts_ms", "out_of_range"),
        ({"score": "0.9"}, "score", "wrong_type"),
        ({"score": False}, "score", "wrong_type"),
        ({"score": float("nan")}, "score", "out_of_range"),
        ({"score": float("inf")}, "score", "out_of_range"),
        ({"score": 10**400}, "score", "out_of_range"),
        ({"model_version": ""}, "model_version", "bad_format"),
        ({"model_version": "v\n1"}, "model_version", "bad_format"),
        ({"model_version": "x" * 129}, "model_version", "bad_format"),
        ({"decided_at_ms": 1.5}, "decided_at_ms", "wrong_type"),
        ({"decided_at_ms": 0}, "decided_at_ms", "out_of_range"),
        ({"extra": 1}, "extra", "unknown_field"),
    ],
)
def test_invalid_values_are_rejected_naming_the_field(changes, field, code):
    with pytest.raises(ActionError) as info:
        Action.from_dict(_valid(**changes))
    assert info.value.field == field
    assert info.value.code == code
    assert info.value.reason.startswith(field)


def test_key_of_another_type_is_a_mismatch():
    body = _valid(idempotency_key=idempotency_key("alert_customer", "txn-1"))
    with pytest.raises(ActionError) as info:
        Action.from_dict(body)
    assert info.value.code == "key_mismatch"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"", "invalid_json"),
        (b"{", "invalid_json"),
        (b"[]", "not_object"),
        (b'"x"', "not_object"),
        (b"NaN", "invalid_json"),
        (b"\xff", "invalid_json"),
    ],
)
def test_undecodable_bodies_have_no_field(raw, code):
    with pytest.raises(ActionError) as info:
        Action.from_json(raw)
    assert (info.value.code, info.value.field) == (code, None)


_ids = st.text(alphabet="abcXYZ019_.:-", min_size=1, max_size=64)


@given(
    action_type=st.sampled_from(["freeze_card", "alert_customer"]),
    card_id=_ids,
    txn_id=_ids,
    ts_ms=st.integers(MIN_TS_MS, MAX_TS_MS),
    score=st.floats(allow_nan=False, allow_infinity=False),
    model_version=st.text(
        alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=128
    ),
)
def test_any_valid_action_round_trips(action_type, card_id, txn_id, ts_ms, score, model_version):
    action = make_action(
        action_type,
        card_id=card_id,
        txn_id=txn_id,
        ts_ms=ts_ms,
        score=score,
        model_version=model_version,
        decided_at_ms=ts_ms,
    )
    assert Action.from_json(action.to_json()) == action


def test_decided_by_defaults_to_the_model_and_a_rule_comes_with_a_list():
    assert Action.from_dict(_valid()).decided_by == "model"
    blocked = Action.from_dict(_valid(decided_by="block_list", rule="block:card:c1"))
    assert (blocked.decided_by, blocked.rule) == ("block_list", "block:card:c1")
    assert Action.from_json(blocked.to_json()) == blocked


@pytest.mark.parametrize(("extra", "field"), [
    ({"decided_by": "rules"}, "decided_by"),
    ({"decided_by": "block_list"}, "rule"),
    ({"decided_by": "model", "rule": "block:card:c1"}, "rule"),
    ({"decided_by": "allow_list", "rule": "block:card:c1"}, "rule"),
    ({"decided_by": "block_list", "rule": "block:person:c1"}, "rule"),
])
def test_a_wrong_decider_is_refused_naming_the_field(extra, field):
    with pytest.raises(ActionError) as err:
        Action.from_dict(_valid(**extra))
    assert err.value.field == field
