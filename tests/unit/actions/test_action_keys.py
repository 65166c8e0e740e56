"""Idempotency keys and fingerprints: what counts as the same action."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from app.actions import action_fingerprint, idempotency_key, make_action
from app.actions.key import KEY_RE

TS = 1_718_000_000_000


def _action(**changes):
    base = make_action(
        "freeze_card",
        card_id="card-1",
        txn_id="txn-1",
        ts_ms=TS,
        score=0.9,
        model_version="m-1",
        decided_at_ms=TS + 5,
    )
    return replace(base, **changes)


def test_key_is_pinned():
    # Changing the scheme silently would re-fire every action still in flight: pin it.
    assert idempotency_key("freeze_card", "txn-1") == "3c02d8d7bacd0fd5a7439e2c59286237"


def test_key_is_32_lower_hex():
    assert KEY_RE.fullmatch(idempotency_key("alert_customer", "t:1"))


def test_key_depends_on_type_and_txn_only():
    a = _action()
    b = make_action(
        "freeze_card",
        card_id="other-card",
        txn_id="txn-1",
        ts_ms=TS + 99,
        score=0.1,
        model_version="m-9",
        decided_at_ms=TS + 86_400_000,
    )
    assert a.idempotency_key == b.idempotency_key
    assert idempotency_key("alert_customer", "txn-1") != a.idempotency_key
    assert idempotency_key("freeze_card", "txn-2") != a.idempotency_key


def test_key_encoding_is_unambiguous():
    # a naive "type:txn" join would make these two collide
    assert idempotency_key("freeze_card", "x:y") != idempotency_key("freeze_card:x", "y")


@given(st.text(max_size=70), st.text(max_size=70))
def test_key_is_deterministic(action_type, txn_id):
    assert idempotency_key(action_type, txn_id) == idempotency_key(action_type, txn_id)


def test_fingerprint_ignores_score_model_version_and_decision_time():
    a = _action()
    assert action_fingerprint(a) == action_fingerprint(
        replace(a, score=0.01, model_version="m-2", decided_at_ms=TS + 10**7)
    )


def test_fingerprint_covers_the_identity():
    a = _action()
    others = [
        replace(a, card_id="card-2"),
        replace(a, ts_ms=TS + 1),
        replace(a, txn_id="txn-2"),
        replace(a, type="alert_customer"),
        replace(a, idempotency_key="f" * 32),
    ]
    prints = {action_fingerprint(o) for o in others}
    assert len(prints) == len(others)
    assert action_fingerprint(a) not in prints
