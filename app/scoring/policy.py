"""The decision policy: a score and two thresholds give freeze_card, alert_customer or nothing.

Rule: score ≥ freeze → [freeze_card, alert_customer]; else score ≥ alert → [alert_customer];
else []. Scores are compared exactly as the float the model produced (float32 widened to a
double, which is exact), against thresholds that are themselves float32 values taken from the
evaluation days' scores, so "exactly at the threshold" is well defined and fires.

Scores within `BOUNDARY_EPS` of a threshold are "boundary" decisions: on CPU the scorer is bit
identical across batch sizes (see app.scoring.scorer), so the offline oracle and the live
worker agree on them too; only a different execution provider (CUDA vs CPU) can move a score
by a few ulps and flip such a decision. The oracle reports them so comparisons can exclude them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Protocol

from app.actions import Action, ActionType, make_action
from app.actions.explanation import Contribution
from app.scoring.lists import ListEntry, Ruling, rule

#: Scores closer than this to a threshold may decide differently on another execution provider.
BOUNDARY_EPS: Final = 1e-5
FREEZE: Final[tuple[ActionType, ...]] = ("freeze_card", "alert_customer")
ALERT: Final[tuple[ActionType, ...]] = ("alert_customer",)
NOTHING: Final[tuple[ActionType, ...]] = ()
#: What a rule's action does to its transaction (app.rules.rule.RuleAction).
RULE_TYPES: Final[dict[str, tuple[ActionType, ...]]] = {
    "freeze_card": FREEZE, "alert_customer": ALERT, "review": ("review",), "allow": NOTHING,
}


class DecidingRule(Protocol):
    """The rule version that decides a transaction (app.rules.rule.Rule has it)."""

    @property
    def action(self) -> str: ...

    @property
    def name(self) -> str: ...


class TxnFields(Protocol):
    """What an action needs from its transaction (app.transactions.Transaction has it)."""

    @property
    def txn_id(self) -> str: ...

    @property
    def card_id(self) -> str: ...

    @property
    def ts_ms(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Score thresholds of the decision policy: 0 ≤ alert ≤ freeze ≤ 1."""

    freeze: float
    alert: float

    def __post_init__(self) -> None:
        for name in ("freeze", "alert"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value)):
                raise ValueError(f"threshold {name} must be a finite number, got {value!r}")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"threshold {name} must be in [0, 1], got {value}")
        if self.alert > self.freeze:
            raise ValueError(f"alert threshold {self.alert} is above freeze threshold "
                             f"{self.freeze}: a freeze must also alert")

    def override(self, *, freeze: float | None = None, alert: float | None = None) -> Thresholds:
        """These thresholds with some replaced (operator settings); validated again."""
        return Thresholds(freeze=self.freeze if freeze is None else freeze,
                          alert=self.alert if alert is None else alert)

    def to_dict(self) -> dict[str, float]:
        """{"freeze": .., "alert": ..} for cards and logs."""
        return {"freeze": self.freeze, "alert": self.alert}


def decide(score: float, thresholds: Thresholds) -> tuple[ActionType, ...]:
    """The action types for one score (a NaN score decides nothing)."""
    if score >= thresholds.freeze:
        return FREEZE
    if score >= thresholds.alert:
        return ALERT
    return NOTHING


def near_threshold(score: float, thresholds: Thresholds, eps: float = BOUNDARY_EPS) -> bool:
    """True when `score` is within `eps` of either threshold (a boundary decision)."""
    return abs(score - thresholds.freeze) <= eps or abs(score - thresholds.alert) <= eps


def ruling(model_types: tuple[ActionType, ...], entry: ListEntry | None,
           deciding: DecidingRule | None = None) -> Ruling:
    """The precedence: a list entry (app.scoring.lists.rule), else the first active rule that
    holds (its action, `decided_by` rule, named `<id>@<version>`), else the model's decision."""
    if entry is not None:
        return rule(model_types, entry)
    if deciding is not None:
        return Ruling(RULE_TYPES[deciding.action], "rule", deciding.name)
    return Ruling(model_types, "model", None)


def build_actions(
    txn: TxnFields,
    score: float,
    model_version: str,
    decided_at_ms: int,
    *,
    thresholds: Thresholds,
    explanation: tuple[Contribution, ...] | None = None,
    entry: ListEntry | None = None,
    deciding: DecidingRule | None = None,
) -> list[Action]:
    """The actions for one scored transaction, keys from app.actions (type and txn_id only),
    after the transaction's allow/block list `entry` and the `deciding` rule (`ruling`); each
    carries who decided it, and `explanation` when given."""
    value = float(score)
    decided = ruling(decide(value, thresholds), entry, deciding)
    return [make_action(kind, card_id=txn.card_id, txn_id=txn.txn_id, ts_ms=txn.ts_ms,
                        score=value, model_version=model_version, decided_at_ms=decided_at_ms,
                        explanation=explanation, decided_by=decided.decided_by, rule=decided.rule)
            for kind in decided.types]
