"""The shadow stage: one more model call per batch, rows with both decisions, switched only
between batches, stopped by None; and the comparison of its rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.control.fold import shadow_version_of
from app.kafka import topics
from app.kafka.records import SourceMessage
from app.kafka.shadowrow import ShadowRow, decode_shadow
from app.scoring.comparison import compare
from app.scoring.policy import Thresholds
from app.stream.engine.pipeline import Scored
from app.stream.engine.shadow import ShadowStage
from app.transactions.contract import parse_transaction


class _Scorer:
    active_provider = "CPUExecutionProvider"

    def __init__(self, shift: float) -> None:
        self.shift = shift
        self.calls = 0

    def score(self, matrix: np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.clip(matrix[:, 0] + self.shift, 0, 1).astype(np.float32)


@dataclass
class _Card:
    thresholds: Thresholds


@dataclass
class _Model:
    version: str
    scorer: _Scorer
    thresholds: Thresholds


def _scored(n: int) -> list[Scored]:
    out = []
    for i in range(n):
        raw = (b'{"txn_id":"t%d","card_id":"c%d","ts_ms":1767225600000,"amount_minor":100,'
               b'"currency":"USD","merchant_id":"m","mcc":5411,"country":"US","channel":"pos"}'
               % (i, i % 3))
        txn = parse_transaction(raw, now_ms=1767225600000)
        out.append(Scored(SourceMessage("transactions", 0, i, None, raw), txn, (0,), False))
    return out


THRESHOLDS = Thresholds(freeze=0.8, alert=0.5)


def test_shadow_rows_carry_both_decisions_and_switch_between_batches() -> None:
    stage = ShadowStage()
    scored = _scored(4)
    matrix = np.array([[0.1], [0.45], [0.6], [0.9]], dtype=np.float32)
    active = matrix[:, 0].copy()
    assert stage.run(scored, matrix, active, active_version="a", active=THRESHOLDS) == []
    scorer = _Scorer(0.1)
    stage.offer(_Model("b", scorer, THRESHOLDS))  # type: ignore[arg-type]
    out = stage.run(scored, matrix, active, active_version="a", active=THRESHOLDS)
    assert scorer.calls == 1  # one model call for the whole batch
    assert {r.topic for r in out} == {topics.FEATURES_SHADOW}
    rows = [decode_shadow(r.value) for r in out]
    assert [r.active_actions for r in rows] == [[], [], ["alert_customer"],
                                                ["freeze_card", "alert_customer"]]
    assert [r.shadow_actions for r in rows] == [[], ["alert_customer"], ["alert_customer"],
                                                ["freeze_card", "alert_customer"]]
    assert {r.shadow_version for r in rows} == {"b"}
    stage.offer(None)
    assert stage.run(scored, matrix, active, active_version="a", active=THRESHOLDS) == []
    assert scorer.calls == 1


def _row(txn: str, a: float, b: float, mine: list[str], theirs: list[str],
         redelivered: bool = False) -> ShadowRow:
    return ShadowRow(txn, "c1", 1, 0, 0, redelivered, "a", a, mine, "b", b, theirs)


def test_compare_counts_each_transaction_once_and_lists_the_differences() -> None:
    rows = [
        _row("t1", 0.1, 0.2, [], []),
        _row("t2", 0.6, 0.9, ["alert_customer"], ["freeze_card", "alert_customer"]),
        _row("t2", 0.6, 0.9, ["alert_customer"], ["freeze_card", "alert_customer"], True),
        _row("t3", 0.9, 0.4, ["freeze_card", "alert_customer"], []),
    ]
    result = compare(rows, {"t2": 1, "t3": 0, "t1": 0})
    assert result.transactions == 3 and result.agreeing == 1
    assert sorted((d.txn_id, d.type, d.by) for d in result.differing) == [
        ("t2", "freeze_card", "shadow"), ("t3", "alert_customer", "active"),
        ("t3", "freeze_card", "active")]
    assert result.quality["active"].freeze_precision == 0.0
    assert result.quality["shadow"].freeze_precision == 1.0
    assert result.quality["shadow"].freeze_recall == 1.0
    assert result.labelled == 3


def test_control_values() -> None:
    assert shadow_version_of(b'{"version": "v1", "at_ms": 1}') == (True, "v1")
    assert shadow_version_of(b'{"version": null}') == (True, None)
    assert shadow_version_of(b"not json") == (False, None)
    assert shadow_version_of(b'{"version": 3}') == (False, None)
