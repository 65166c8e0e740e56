"""Active vs shadow model over the same transactions: agreement, the actions that would differ,
score correlation and, with labels, precision/recall of both (pure: rows in, figures out)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.kafka.shadowrow import ShadowRow


@dataclass(frozen=True, slots=True)
class DifferingAction:
    """An action one model would take on a transaction and the other would not."""

    txn_id: str
    card_id: str
    ts_ms: int
    type: str
    by: str  # "active" or "shadow": the model that would take it
    active_score: float
    shadow_score: float

    def to_dict(self) -> dict[str, Any]:
        return {"txn_id": self.txn_id, "card_id": self.card_id, "ts_ms": self.ts_ms,
                "type": self.type, "by": self.by, "active_score": self.active_score,
                "shadow_score": self.shadow_score}


@dataclass(frozen=True, slots=True)
class Quality:
    """One model's decisions against labels: for freezing, and for any action."""

    freeze_precision: float | None
    freeze_recall: float | None
    action_precision: float | None
    action_recall: float | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """What `model compare` reports."""

    active_versions: tuple[str, ...]
    shadow_versions: tuple[str, ...]
    transactions: int
    agreeing: int
    differing: list[DifferingAction]
    correlation: float | None
    labelled: int = 0
    quality: dict[str, Quality] = field(default_factory=dict)  # "active"/"shadow" → figures

    @property
    def agreement(self) -> float | None:
        return self.agreeing / self.transactions if self.transactions else None


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _quality(flags: list[tuple[bool, bool]], labels: list[int]) -> Quality:
    positives = sum(labels)
    freeze_tp = sum(1 for (f, _), y in zip(flags, labels, strict=True) if f and y)
    act_tp = sum(1 for (_, a), y in zip(flags, labels, strict=True) if a and y)
    return Quality(_ratio(freeze_tp, sum(f for f, _ in flags)), _ratio(freeze_tp, positives),
                   _ratio(act_tp, sum(a for _, a in flags)), _ratio(act_tp, positives))


def compare(rows: Iterable[ShadowRow], labels: Mapping[str, int] | None = None) -> Comparison:
    """Each transaction once (its first row: a redelivery repeats the same decisions)."""
    seen: dict[str, ShadowRow] = {}
    for row in rows:
        seen.setdefault(row.txn_id, row)
    unique = sorted(seen.values(), key=lambda r: (r.ts_ms, r.txn_id))
    differing: list[DifferingAction] = []
    agreeing = 0
    for r in unique:
        mine, theirs = set(r.active_actions), set(r.shadow_actions)
        if mine == theirs:
            agreeing += 1
            continue
        for kind, by in [*((t, "active") for t in sorted(mine - theirs)),
                         *((t, "shadow") for t in sorted(theirs - mine))]:
            differing.append(DifferingAction(r.txn_id, r.card_id, r.ts_ms, kind, by,
                                             r.active_score, r.shadow_score))
    correlation = None
    if len(unique) >= 2:
        a = np.array([r.active_score for r in unique])
        b = np.array([r.shadow_score for r in unique])
        if a.std() > 0 and b.std() > 0:
            correlation = float(np.corrcoef(a, b)[0, 1])
    quality: dict[str, Quality] = {}
    labelled = 0
    if labels is not None:
        known = [r for r in unique if r.txn_id in labels]
        labelled = len(known)
        ys = [labels[r.txn_id] for r in known]
        quality["active"] = _quality([("freeze_card" in r.active_actions, bool(r.active_actions))
                                      for r in known], ys)
        quality["shadow"] = _quality([("freeze_card" in r.shadow_actions, bool(r.shadow_actions))
                                      for r in known], ys)
    return Comparison(tuple(sorted({r.active_version for r in unique})),
                      tuple(sorted({r.shadow_version for r in unique})), len(unique), agreeing,
                      differing, correlation, labelled, quality)
