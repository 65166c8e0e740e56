"""The plan (all rules' atoms evaluated together) gives each rule the mask its expression alone
gives, on random rule sets and rows: thresholds, betweens, memberships, ors, nots, arithmetic."""

from __future__ import annotations

import random

import numpy as np

from app.rules.language import Columns, parse
from app.rules.plan import Plan, disjuncts_of

NUMBERS = ("amount_minor", "score", "count_1h", "merchant_fraud_share_7d", "hour")
COUNTRIES = ("US", "GB", "DE", "FR")


def _atom(rng: random.Random) -> str:
    name = rng.choice(NUMBERS)
    value = rng.choice([0, 1, 2, 0.5, 0.25, 3, 100, -1])
    return rng.choice([
        f"{name} {rng.choice(['<', '<=', '>', '>=', '==', '!='])} {value}",
        f"{value} < {name}",
        f"between({name}, {value}, {value + rng.choice([0, 1, 50])})",
        f"country {rng.choice(['in', 'not in'])} {tuple(rng.sample(COUNTRIES, 2))!r}",
        f"country == '{rng.choice(COUNTRIES)}'",
        "listed('block')",
        f"not ({name} > {value})",
        f"{name} / count_1h > {value}",
        f"0 <= {name} < {value} <= 2",
    ])


def _rule(rng: random.Random) -> str:
    conj = [" and ".join(_atom(rng) for _ in range(rng.randint(1, 3)))
            for _ in range(rng.choice([1, 1, 2]))]
    return " or ".join(f"({c})" for c in conj) if len(conj) > 1 else conj[0]


def _columns(rng: np.random.Generator, n: int) -> Columns:
    data = {"amount_minor": rng.choice([0.0, 1.0, 100.0, 250.0], n),
            "score": rng.choice([0.0, 0.25, 0.5, 1.0], n),
            "count_1h": rng.choice([0.0, 1.0, 2.0, 3.0], n),
            "merchant_fraud_share_7d": rng.choice([0.0, 0.25, 0.5], n),
            "hour": rng.choice([0.0, 1.0, 23.0], n),
            "country": np.array(rng.choice(["US", "GB", "JP"], n), dtype=object)}
    return Columns(n, data.__getitem__, {"block": rng.random(n) < 0.3,
                                         "allow": np.zeros(n, dtype=bool)})


def test_the_plan_equals_each_expression_alone() -> None:
    rng, nrng = random.Random(3), np.random.default_rng(3)
    for _ in range(60):
        texts = [_rule(rng) for _ in range(rng.randint(1, 12))]
        exprs = [parse(t) for t in texts]
        for n in (1, 7, 40):
            cols = _columns(nrng, n)
            got = Plan(exprs).masks(cols)
            for t, e, row in zip(texts, exprs, got, strict=True):
                assert row.tolist() == e.mask(cols).tolist(), t


def test_a_rule_splits_into_thresholds_and_the_rest() -> None:
    [[a, b, c]] = disjuncts_of("amount_minor > 5 and between(score, 0.1, 0.3)")
    assert (a.name, a.op, a.value) == ("amount_minor", "gt", 5.0)
    assert (b.op, c.op) == ("ge", "le")
    [[m], [rest]] = disjuncts_of("country not in ('US',) or amount_minor / count_1h > 2")
    assert (m.name, m.values, m.negate) == ("country", frozenset({"US"}), True)
    assert not hasattr(rest, "name")  # evaluated by its own closure
