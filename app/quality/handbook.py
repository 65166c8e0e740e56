"""The Fraud Detection Handbook's protocol: train/delay/test weeks, known-compromised cards, CP@k.

Pure functions over columns (numpy), following the book's shared functions
(`get_train_test_set`, `prequentialSplit`, `card_precision_top_k`):
- a split trains on the `train` days from a start date, skips `delay` days, tests on the
  `test` days after; a test day drops the cards known compromised by then: those with a fraud in
  the training days or on any day from the training's end up to the day before that test day
  minus the delay (the book adds, for test day i, the frauds of day train_end + i − 1);
- the headline figures average four test weeks: the training start shifted back by 7 days per
  fold from `TEST_START` (the book's `start_date_training_for_test`);
- Card Precision@k per test day: the cards ranked by their highest score that day (a card's
  label is its highest label that day), the share of compromised cards among the first k,
  cards found on earlier test days removed; averaged over the days.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Final

import numpy as np

DAY_MS: Final = 86_400_000
#: The book's data starts on this day: its TX_TIME_DAYS counts from it.
DATA_START: Final = date(2018, 4, 1)
#: The baseline split's training start (chapter 3) and the first of the four test folds'.
BASELINE_START: Final = date(2018, 7, 25)
TEST_START: Final = date(2018, 8, 15)
#: The first validation fold's training start (chapter 5: 2018-07-25 − 14 days).
VALID_START: Final = date(2018, 7, 11)
WEEK: Final = 7


def day_index(ts_ms: np.ndarray) -> np.ndarray:
    """Days since DATA_START (the book's TX_TIME_DAYS)."""
    start = (DATA_START - date(1970, 1, 1)).days
    return np.asarray(ts_ms, dtype=np.int64) // DAY_MS - start


def _days(d: date) -> int:
    return (d - DATA_START).days


@dataclass(frozen=True, slots=True)
class Split:
    """Row indices of one train/test split (test rows already without known-compromised cards)."""

    train_start: date
    train: np.ndarray
    test: np.ndarray

    @property
    def test_days(self) -> tuple[date, date]:
        first = self.train_start + timedelta(days=2 * WEEK)
        return first, first + timedelta(days=WEEK - 1)


def split(days: np.ndarray, cards: np.ndarray, fraud: np.ndarray, train_start: date, *,
          train: int = WEEK, delay: int = WEEK, test: int = WEEK) -> Split:
    """The book's `get_train_test_set` over day indices, card ids and fraud labels."""
    s = _days(train_start)
    train_rows = np.flatnonzero((days >= s) & (days < s + train))
    known = set(np.unique(cards[train_rows][fraud[train_rows] == 1]).tolist())
    test_rows = []
    for i in range(test):
        before = np.flatnonzero((days == s + train + i - 1) & (fraud == 1))
        known.update(np.unique(cards[before]).tolist())
        today = np.flatnonzero(days == s + train + delay + i)
        keep = ~np.isin(cards[today], np.fromiter(known, dtype=cards.dtype, count=len(known))) \
            if known else np.ones(len(today), dtype=bool)
        test_rows.append(today[keep])
    return Split(train_start, train_rows, np.concatenate(test_rows) if test_rows else
                 np.empty(0, dtype=np.int64))


def folds(days: np.ndarray, cards: np.ndarray, fraud: np.ndarray, start: date,
          n: int = 4) -> list[Split]:
    """The book's `prequentialSplit`: the training start shifted back a week per fold."""
    return [split(days, cards, fraud, start - timedelta(days=WEEK * k)) for k in range(n)]


def card_precision_at_k(days: np.ndarray, cards: np.ndarray, fraud: np.ndarray,
                        scores: np.ndarray, k: int = 100) -> float:
    """The book's mean Card Precision@k over the test days present (see the module doc)."""
    found: set[object] = set()
    per_day = []
    for day in np.unique(days).tolist():
        rows = np.flatnonzero(days == day)
        best: dict[object, tuple[float, int]] = {}
        for card, s, y in zip(cards[rows].tolist(), scores[rows].tolist(),
                              fraud[rows].tolist(), strict=True):
            if card in found:
                continue
            prev = best.get(card)
            best[card] = (s, y) if prev is None else (max(prev[0], s), max(prev[1], y))
        # pandas' sort_values is not stable by default either; ties among scores are rare
        ranked = sorted(best.items(), key=lambda kv: -kv[1][0])[:k]
        hits = [card for card, (_, y) in ranked if y == 1]
        per_day.append(len(hits) / k)
        found.update(hits)
    return float(np.mean(per_day)) if per_day else float("nan")


@dataclass(frozen=True, slots=True)
class Figures:
    """The book's three figures for one test period."""

    auc: float
    ap: float
    cp100: float


def figures(days: np.ndarray, cards: np.ndarray, fraud: np.ndarray,
            scores: np.ndarray) -> Figures:
    """AUC ROC, average precision and CP@100 of scores over test rows."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    return Figures(float(roc_auc_score(fraud, scores)),
                   float(average_precision_score(fraud, scores)),
                   card_precision_at_k(days, cards, fraud, scores, 100))


def mean_std(values: Sequence[Figures]) -> tuple[Figures, Figures]:
    """Mean and standard deviation (the book's: numpy's population std) over folds."""
    arr = np.array([[f.auc, f.ap, f.cp100] for f in values])
    m, s = arr.mean(axis=0), arr.std(axis=0)
    return Figures(*m.tolist()), Figures(*s.tolist())


#: The book's published rows (chapter 3 baseline week; chapters 5-7's best over 4 test weeks).
PUBLISHED: Final = (
    ("book: decision tree, depth 2 (baseline week)", "baseline", Figures(0.763, 0.496, 0.241)),
    ("book: logistic regression (baseline week)", "baseline", Figures(0.871, 0.606, 0.291)),
    ("book: random forest (baseline week)", "baseline", Figures(0.867, 0.658, 0.287)),
    ("book: XGBoost (baseline week)", "baseline", Figures(0.862, 0.639, 0.273)),
    ("book: feed-forward NN, best (4 weeks)", "folds", Figures(0.876, 0.675, 0.303)),
    ("book: XGBoost, best (4 weeks)", "folds", Figures(0.869, 0.687, 0.303)),
)
