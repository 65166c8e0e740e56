"""A backtest's per-rule figures equal a direct count, row by row."""

from __future__ import annotations

import random

import numpy as np

from app.rules.figures import rule_figures
from app.rules.language import Columns
from app.rules.rule import Rule
from app.rules.ruleset import RuleSet


def _rule(rid: str, expression: str, action: str, mode: str, order: int) -> Rule:
    return Rule(id=rid, version=1, expression=expression, action=action,  # type: ignore[arg-type]
                mode=mode, owner="o", reason="r", order=order, author="a", at_ms=0)  # type: ignore[arg-type]


def test_figures_equal_a_direct_count() -> None:
    rng = random.Random(11)
    n = 400
    amount = np.array([rng.choice([10, 500, 5_000, 50_000]) for _ in range(n)], dtype=np.float64)
    score = np.array([rng.random() for _ in range(n)])
    cards = np.array([f"c{rng.randint(0, 60)}" for _ in range(n)], dtype=object)
    fraud = np.array([rng.random() < 0.1 for _ in range(n)])
    listed_rows = np.array([rng.random() < 0.05 for _ in range(n)])
    model_acts = score >= 0.8
    rules = RuleSet.of([
        _rule("big", "amount_minor >= 5000", "freeze_card", "active", 10),
        _rule("unsure", "between(score, 0.3, 0.6)", "review", "active", 20),
        _rule("watch", "amount_minor >= 500 and score > 0.5", "alert_customer", "log_only", 30),
    ])
    cols = Columns(n, {"amount_minor": amount, "score": score}.__getitem__)
    got = {f.name: f for f in rule_figures(rules, cols, fraud=fraud, amount=amount, cards=cards,
                                           model_acts=model_acts, listed_rows=listed_rows)}
    holds = {"big@1": [a >= 5000 for a in amount],
             "unsure@1": [0.3 <= s <= 0.6 for s in score],
             "watch@1": [a >= 500 and s > 0.5 for a, s in zip(amount, score, strict=True)]}
    fraud_cards = {c for c, f in zip(cards, fraud, strict=True) if f}
    decided: dict[str, list[int]] = {"big@1": [], "unsure@1": [], "watch@1": []}
    for i in range(n):  # precedence, literally: a list entry, then active rules in order
        if listed_rows[i]:
            continue
        for name in ("big@1", "unsure@1"):
            if holds[name][i]:
                decided[name].append(i)
                break
    total_fraud = int(fraud.sum())
    for name, f in got.items():
        hit = [i for i in range(n) if holds[name][i]]
        fraud_hits = sum(1 for i in hit if fraud[i])
        assert (f.hits, f.decides, f.fraud_hits) == (len(hit), len(decided[name]), fraud_hits)
        assert f.precision == (fraud_hits / len(hit) if hit else None)
        assert f.recall == fraud_hits / total_fraud
        caught = sum(amount[i] for i in decided[name] if fraud[i]) if f.action in (
            "freeze_card", "review") else 0
        assert f.fraud_amount_caught == caught
        wrongly = len({cards[i] for i in decided[name]} - fraud_cards) \
            if f.action == "freeze_card" else 0
        assert f.cards_frozen_wrongly == wrongly
        assert f.overlap_model == sum(1 for i in hit if model_acts[i])
        for other, count in f.overlap_rules.items():
            assert count == sum(1 for i in hit if holds[other][i])
