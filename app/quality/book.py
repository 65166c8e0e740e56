"""The join of labels to decisions, point in time (pure: the feed folds topic records into it).

Per scored transaction (features.served: txn_id, card_id, ts_ms; a redelivered copy once) the
book knows whether the pipeline froze or alerted on it (actions) and every label reported for
it or its card (labels; a label_id counted once). A day is the UTC date of the transaction's
event time, the day it was decided (the worker decides within seconds of the event; on a
replayed log, the log's own days), so live figures and `fraudstream backtest` over the same log
group alike. A maturity m counts only the labels reported by ts + m: precision at 7d is what
was known a week after the decisions (labels arrive late; a recent day's 30d figure fills in as
they come). Truth, as in app.scoring.backtest: the transaction's latest label, else its card's,
else legitimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from app.transactions.labels import LabelRecord

DAY_MS: Final = 86_400_000
#: Label maturities reported: name -> how long after the event a label may arrive (None: any).
MATURITIES: Final[Mapping[str, int | None]] = {
    "1d": DAY_MS, "7d": 7 * DAY_MS, "30d": 30 * DAY_MS, "all": None}
ALL_DAYS: Final = "all"


def day_of(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).strftime("%Y-%m-%d")


@dataclass(slots=True)
class Counts:
    """One day (or all days) at one maturity."""

    freezes: int = 0
    fraud: int = 0
    fraud_frozen: int = 0

    @property
    def precision(self) -> float | None:
        """Freezes on transactions known to be fraud / freezes."""
        return self.fraud_frozen / self.freezes if self.freezes else None

    @property
    def recall(self) -> float | None:
        """Fraud transactions frozen / fraud transactions."""
        return self.fraud_frozen / self.fraud if self.fraud else None


@dataclass(frozen=True, slots=True)
class Quality:
    """Counts by (day, maturity); day ALL_DAYS sums every day kept."""

    counts: Mapping[tuple[str, str], Counts]
    transactions: int
    labels: int

    def at(self, day: str, maturity: str = "all") -> Counts:
        return self.counts.get((day, maturity), Counts())


@dataclass(slots=True)
class QualityBook:
    """What the feed has read so far; `quality()` computes the figures from it."""

    #: Days of event time kept (older transactions are forgotten; 0: keep all).
    keep_days: int = 35
    txns: dict[str, tuple[str, int]] = field(default_factory=dict)  # txn -> (card, ts_ms)
    frozen: dict[str, tuple[str, int]] = field(default_factory=dict)  # from freeze actions
    by_txn: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # (reported, label)
    by_card: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    label_ids: set[str] = field(default_factory=set)
    newest_ts: int = 0

    def served(self, txn_id: str, card_id: str, ts_ms: int) -> None:
        self.txns.setdefault(txn_id, (card_id, ts_ms))
        self.newest_ts = max(self.newest_ts, ts_ms)

    def action(self, action_type: str, txn_id: str, card_id: str, ts_ms: int) -> None:
        if action_type == "freeze_card":
            self.frozen.setdefault(txn_id, (card_id, ts_ms))

    def label(self, record: LabelRecord) -> None:
        if record.label_id in self.label_ids:
            return  # a file sent twice, a label forwarded twice
        self.label_ids.add(record.label_id)
        if record.txn_id:
            self.by_txn.setdefault(record.txn_id, []).append((record.reported_at_ms, record.label))
        elif record.card_id:
            self.by_card.setdefault(record.card_id, []).append(
                (record.reported_at_ms, record.label))

    def forget_old(self) -> None:
        """Drop transactions (and their freezes) older than `keep_days` before the newest."""
        if not self.keep_days or not self.newest_ts:
            return
        horizon = self.newest_ts - self.keep_days * DAY_MS
        for book in (self.txns, self.frozen):
            for txn_id in [t for t, (_c, ts) in book.items() if ts < horizon]:
                del book[txn_id]

    def quality(self) -> Quality:
        """The figures now: per day and over all days, per maturity."""
        counts: dict[tuple[str, str], Counts] = {}

        def bump(day: str, maturity: str, *, frozen: bool, fraud: bool) -> None:
            for key in ((day, maturity), (ALL_DAYS, maturity)):
                c = counts.get(key)
                if c is None:
                    c = counts[key] = Counts()
                c.freezes += frozen
                c.fraud += fraud
                c.fraud_frozen += frozen and fraud

        # only frozen or labelled transactions can count anywhere
        candidates = set(self.frozen) | (set(self.by_txn) & set(self.txns))
        if self.by_card:
            candidates |= {t for t, (card, _ts) in self.txns.items() if card in self.by_card}
        for txn_id in candidates:
            known = self.txns.get(txn_id) or self.frozen[txn_id]
            card_id, ts_ms = known
            is_frozen = txn_id in self.frozen  # a frozen transaction was scored, served or not
            day = day_of(ts_ms)
            for maturity, within in MATURITIES.items():
                until = None if within is None else ts_ms + within
                fraud = self._truth(txn_id, card_id, until)
                if is_frozen or fraud:
                    bump(day, maturity, frozen=is_frozen, fraud=fraud)
        return Quality(counts, len(self.txns), len(self.label_ids))

    def _truth(self, txn_id: str, card_id: str, until: int | None) -> bool:
        for labels in (self.by_txn.get(txn_id), self.by_card.get(card_id)):
            latest = _latest(labels or (), until)
            if latest is not None:
                return latest == 1
        return False


def _latest(labels: Iterable[tuple[int, int]], until: int | None) -> int | None:
    """The label reported last by `until` (a tie: the one read later)."""
    best: tuple[int, int] | None = None
    for reported, label in labels:
        if (until is None or reported <= until) and (best is None or reported >= best[0]):
            best = (reported, label)
    return None if best is None else best[1]
