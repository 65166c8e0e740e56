"""The decision policy: exact threshold semantics, and keys that depend on (type, txn_id) only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.actions import idempotency_key
from app.scoring.policy import (
    BOUNDARY_EPS,
    Thresholds,
    build_actions,
    decide,
    near_threshold,
)
from app.transactions.contract import Transaction

T = Thresholds(freeze=float(np.float32(0.7)), alert=float(np.float32(0.2)))
TXN = Transaction("t-1", "card-9", 1_767_225_600_000, 1_000, "EUR", "m1", 5411, "FR", "pos")


def test_exactly_at_a_threshold_fires_and_one_ulp_below_does_not() -> None:
    assert decide(T.freeze, T) == ("freeze_card", "alert_customer")
    assert decide(math.nextafter(T.freeze, 0.0), T) == ("alert_customer",)
    below = float(np.nextafter(np.float32(T.freeze), np.float32(0)))  # a float32 score
    assert decide(below, T) == ("alert_customer",)
    assert decide(T.alert, T) == ("alert_customer",)
    assert decide(math.nextafter(T.alert, 0.0), T) == ()
    assert decide(1.0, T) == ("freeze_card", "alert_customer")
    assert decide(0.0, T) == ()
    assert decide(float("nan"), T) == ()


def test_alert_equal_to_freeze_leaves_no_alert_only_band() -> None:
    same = Thresholds(freeze=0.5, alert=0.5)
    assert decide(0.5, same) == ("freeze_card", "alert_customer")
    assert decide(0.4999, same) == ()


def test_thresholds_are_validated_and_overridable() -> None:
    with pytest.raises(ValueError, match="above freeze"):
        Thresholds(freeze=0.3, alert=0.4)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        Thresholds(freeze=1.5, alert=0.1)
    with pytest.raises(ValueError, match="finite"):
        Thresholds(freeze=float("nan"), alert=0.1)
    assert T.override(alert=0.1) == Thresholds(freeze=T.freeze, alert=0.1)
    assert T.override() == T
    with pytest.raises(ValueError, match="above freeze"):
        T.override(alert=0.9)


def test_near_threshold_marks_boundary_scores() -> None:
    assert near_threshold(T.freeze + BOUNDARY_EPS / 2, T)
    assert near_threshold(T.alert - 0.99 * BOUNDARY_EPS, T)
    assert not near_threshold(T.alert + 3 * BOUNDARY_EPS, T)


def test_build_actions_keys_depend_on_type_and_txn_only() -> None:
    a = build_actions(TXN, 0.9, "mlp-aaaaaaaaaaaa", 1_767_225_600_500, thresholds=T)
    b = build_actions(TXN, float(np.float32(0.75)), "mlp-bbbbbbbbbbbb", 1_767_999_999_999,
                      thresholds=T)
    assert [x.type for x in a] == ["freeze_card", "alert_customer"]
    assert [x.idempotency_key for x in a] == [x.idempotency_key for x in b] == [
        idempotency_key("freeze_card", "t-1"), idempotency_key("alert_customer", "t-1")]
    first = a[0]
    assert (first.card_id, first.txn_id, first.ts_ms, first.score, first.model_version,
            first.decided_at_ms) == ("card-9", "t-1", TXN.ts_ms, 0.9, "mlp-aaaaaaaaaaaa",
                                     1_767_225_600_500)
    alert_only = build_actions(TXN, 0.3, "mlp-aaaaaaaaaaaa", TXN.ts_ms, thresholds=T)
    assert [x.type for x in alert_only] == ["alert_customer"]
    assert alert_only[0].idempotency_key == a[1].idempotency_key
    assert build_actions(TXN, 0.01, "mlp-aaaaaaaaaaaa", TXN.ts_ms, thresholds=T) == []
