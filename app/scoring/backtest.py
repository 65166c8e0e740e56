"""Backtest: a log's decisions under the active and a candidate policy, measured against labels
(pure: the CLI reads the files, computes the features and scores once, and calls these).

Both policies decide the same scored rows (the offline fold's features, the model's CPU scores,
the same allow/block lists) through `oracle.decide_rows`, the code that reproduces the live
pipeline's actions; only the thresholds differ. Definitions, per accepted transaction:

- truth: its own label when it has one (the latest reported wins), else its card's label, else
  not fraud (an unlabelled transaction counts as legitimate);
- a freeze: the transaction was decided freeze_card; an alert: alert_customer without a freeze;
  a review: a rule sent it to review;
- precision of freezes: fraud freezes / freezes; recall of fraud: fraud transactions frozen /
  fraud transactions; fraud amount caught: the amount (minor units) of fraud transactions frozen;
- a card frozen wrongly: a card frozen at least once none of whose transactions is fraud.

Days are the UTC dates of the transactions' event time (offline, decided_at_ms = ts_ms).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.actions import Action
from app.scoring.policy import Thresholds
from app.transactions.labels import LabelRecord


@dataclass(frozen=True, slots=True)
class Truth:
    """Labels folded per transaction and per card (the latest reported label of each)."""

    txns: dict[str, int]
    cards: dict[str, int]

    @classmethod
    def of(cls, records: Iterable[LabelRecord]) -> Truth:
        latest: dict[tuple[str, str], tuple[int, int]] = {}
        for rec in records:
            key = ("txn", rec.txn_id) if rec.txn_id else ("card", rec.card_id or "")
            seen = latest.get(key)
            if seen is None or rec.reported_at_ms >= seen[0]:
                latest[key] = (rec.reported_at_ms, rec.label)
        return cls({k: v[1] for (kind, k), v in latest.items() if kind == "txn"},
                   {k: v[1] for (kind, k), v in latest.items() if kind == "card"})

    def is_fraud(self, txn_id: str, card_id: str) -> bool:
        label = self.txns.get(txn_id)
        if label is None:
            label = self.cards.get(card_id, 0)
        return label == 1


@dataclass(frozen=True)
class Rows:
    """The scored transactions, column by column, in log order."""

    txn_id: Sequence[str]
    card_id: Sequence[str]
    ts_ms: Sequence[int]
    amount_minor: Sequence[int]
    score: Sequence[float]

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Row of each txn_id (an accepted transaction is one row)."""
        return {t: i for i, t in enumerate(self.txn_id)}

    def fraud_rows(self, truth: Truth) -> frozenset[int]:
        """The rows that are fraud by `truth` (look them up once, pass them to every
        `evaluate`)."""
        return frozenset(i for i, (t, c) in enumerate(zip(self.txn_id, self.card_id, strict=True))
                         if truth.is_fraud(t, c))


@dataclass(slots=True)
class Tally:
    """Counts of one policy over some transactions (a day, or all)."""

    freezes: int = 0
    alerts: int = 0
    reviews: int = 0
    fraud_freezes: int = 0
    fraud: int = 0
    fraud_amount: int = 0
    fraud_amount_caught: int = 0

    @property
    def precision(self) -> float | None:
        return self.fraud_freezes / self.freezes if self.freezes else None

    @property
    def recall(self) -> float | None:
        return self.fraud_freezes / self.fraud if self.fraud else None


@dataclass(frozen=True, slots=True)
class Outcome:
    """One policy's decisions and what they were worth."""

    name: str
    thresholds: Thresholds
    actions: list[Action]
    total: Tally
    days: dict[str, Tally]
    cards_frozen: int
    cards_frozen_wrongly: int


def day_of(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).strftime("%Y-%m-%d")


def evaluate(name: str, thresholds: Thresholds, actions: list[Action], rows: Rows,
             truth: Truth, fraud_rows: frozenset[int] | None = None) -> Outcome:
    """Measure one policy's `actions` over `rows` against `truth` (`fraud_rows`:
    rows.fraud_rows(truth), when already known)."""
    index = rows.index
    frozen_rows = {index[a.txn_id] for a in actions if a.type == "freeze_card"}
    alerted_rows = {index[a.txn_id] for a in actions if a.type == "alert_customer"} - frozen_rows
    reviewed_rows = {index[a.txn_id] for a in actions if a.type == "review"}
    if fraud_rows is None:
        fraud_rows = rows.fraud_rows(truth)
    total, days = Tally(), {}
    fraud_cards: set[str] = set()
    frozen_cards: set[str] = set()
    # only rows that were acted on or are fraud count anywhere
    for i in sorted(frozen_rows | alerted_rows | reviewed_rows | fraud_rows):
        card_id, amount = rows.card_id[i], rows.amount_minor[i]
        frozen, alerted, fraud = i in frozen_rows, i in alerted_rows, i in fraud_rows
        day = days.get(d := day_of(rows.ts_ms[i]))
        if day is None:
            day = days[d] = Tally()
        for tally in (total, day):
            tally.freezes += frozen
            tally.alerts += alerted
            tally.reviews += i in reviewed_rows
            if fraud:
                tally.fraud += 1
                tally.fraud_amount += amount
                tally.fraud_freezes += frozen
                tally.fraud_amount_caught += amount if frozen else 0
        if fraud:
            fraud_cards.add(card_id)
        if frozen:
            frozen_cards.add(card_id)
    return Outcome(name, thresholds, actions, total, dict(sorted(days.items())),
                   len(frozen_cards), len(frozen_cards - fraud_cards))


@dataclass(frozen=True, slots=True)
class Change:
    """An action one policy emits and the other does not."""

    kind: str  # "added" (candidate only) or "removed" (active only)
    action: Action
    fraud: bool

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.kind, "fraud": self.fraud, **self.action.to_dict()}


@dataclass(frozen=True, slots=True)
class Comparison:
    """The active policy beside a candidate, and the actions that change."""

    active: Outcome
    candidate: Outcome | None
    changes: list[Change] = field(default_factory=list)


def compare(active: Outcome, candidate: Outcome | None, truth: Truth) -> Comparison:
    """The two outcomes and, by idempotency key, every action that one has and the other not
    (in event-time order)."""
    if candidate is None:
        return Comparison(active, None, [])
    before = {a.idempotency_key: a for a in active.actions}
    after = {a.idempotency_key: a for a in candidate.actions}
    changes = [Change("removed", a, truth.is_fraud(a.txn_id, a.card_id))
               for k, a in before.items() if k not in after]
    changes += [Change("added", a, truth.is_fraud(a.txn_id, a.card_id))
                for k, a in after.items() if k not in before]
    changes.sort(key=lambda c: (c.action.ts_ms, c.action.txn_id, c.action.type))
    return Comparison(active, candidate, changes)


def parse_policy(raw: bytes, base: Thresholds) -> Thresholds:
    """A policy file: a JSON object with `freeze` and/or `alert` (the other from `base`);
    ValueError naming the field."""
    import orjson

    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ValueError("not valid JSON (expected {\"freeze\": 0.9, \"alert\": 0.5})") from None
    if not isinstance(obj, dict) or not obj:
        raise ValueError("must be a JSON object with freeze and/or alert")
    for name in obj:
        if name not in ("freeze", "alert"):
            raise ValueError(f"{str(name)[:64]}: unknown field (allowed: freeze, alert)")
    for name, value in obj.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name}: must be a number in [0, 1]")
    try:
        return base.override(freeze=obj.get("freeze"), alert=obj.get("alert"))
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix("threshold ")) from None
