"""Per-rule figures of a backtest: what each rule holds for and decides over a log, measured
against labels (pure: the CLI passes the offline table's columns and the truth).

For each rule (active and log_only alike, in evaluation order):
- hits: the transactions it holds for (whatever decides them); decides: those it decides
  (an active rule, no list entry and no earlier active rule before it);
- precision: fraud hits / hits; recall: fraud hits / fraud transactions;
- fraud amount caught: the amount (minor units) of the fraud transactions it decides to freeze
  or send to review;
- cards frozen wrongly: (freeze_card rules) cards it froze none of whose transactions is fraud;
- overlap with the model: hits the model's thresholds alone would act on (score >= alert);
- overlap with other rules: hits each other rule holds for too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.rules.language import Columns
from app.rules.ruleset import RuleSet


@dataclass(frozen=True, slots=True)
class RuleFigures:
    """One rule over one log."""

    name: str
    mode: str
    action: str
    hits: int
    decides: int
    fraud_hits: int
    precision: float | None
    recall: float | None
    fraud_amount_caught: int
    cards_frozen_wrongly: int
    overlap_model: int
    overlap_rules: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]


def rule_figures(rules: RuleSet, cols: Columns, *, fraud: np.ndarray, amount: np.ndarray,
                 cards: np.ndarray, model_acts: np.ndarray, listed_rows: np.ndarray
                 ) -> list[RuleFigures]:
    """The figures of every evaluated rule (see the module doc). `fraud`, `model_acts` and
    `listed_rows` (a list entry decides the row) are bool arrays over the rows."""
    masks = [np.asarray(e.mask(cols), dtype=bool) for e in rules.compiled]
    open_rows = ~listed_rows
    total_fraud = int(fraud.sum())
    fraud_cards = set(cards[fraud].tolist())
    out = []
    for i, (r, mask) in enumerate(zip(rules.rules, masks, strict=True)):
        decides = mask & open_rows if r.mode == "active" else np.zeros_like(mask)
        if r.mode == "active":
            open_rows = open_rows & ~mask
        hits, fraud_hits = int(mask.sum()), int((mask & fraud).sum())
        wrongly = 0
        if r.action == "freeze_card":
            wrongly = len(set(cards[decides].tolist()) - fraud_cards)
        out.append(RuleFigures(
            r.name, r.mode, r.action, hits, int(decides.sum()), fraud_hits,
            fraud_hits / hits if hits else None,
            fraud_hits / total_fraud if total_fraud else None,
            int(amount[decides & fraud].sum()) if r.action in ("freeze_card", "review") else 0,
            wrongly, int((mask & model_acts).sum()),
            {o.name: int((mask & m).sum()) for j, (o, m) in enumerate(zip(rules.rules, masks,
                                                                           strict=True))
             if j != i}))
    return out


def render_figures(title: str, figures: list[RuleFigures]) -> list[str]:
    """The report's lines for one rule set."""
    if not figures:
        return []
    lines = [f"{title}: hits · decides · precision · recall · fraud amount caught · cards "
             "frozen wrongly · overlap with the model · with other rules"]
    for f in figures:
        precision = "-" if f.precision is None else f"{f.precision:.3f}"
        recall = "-" if f.recall is None else f"{f.recall:.3f}"
        others = ", ".join(f"{k} {v:,}" for k, v in f.overlap_rules.items() if v) or "none"
        lines.append(f"  {f.name} ({f.mode}, {f.action}): {f.hits:,} · {f.decides:,} · "
                     f"{precision} · {recall} · {f.fraud_amount_caught:,} · "
                     f"{f.cards_frozen_wrongly:,} · {f.overlap_model:,} · {others}")
    return lines
