"""Prequential validation: fit on past windows, test on the window after the feedback delay.

The protocol of the Fraud Detection Handbook (Le Borgne et al., "Reproducible Machine Learning
for Credit Card Fraud Detection", ch. 5, prequential validation): a fold trains on the days
[t, t + train), skips `delay` days (the labels of those days are not known yet when the model
would ship) and tests on [t + train + delay, t + train + delay + test). Fold k starts k × test
days before the most recent fold, so the folds walk back through the log; each candidate of a
grid is fitted and tested on every fold and scored by average precision (the area under the
precision-recall curve, sklearn's average_precision_score), whose mean over the folds ranks
the candidates. The most recent fold, by default, ends where the log's last day ends.

Optionally (`groups`, e.g. card ids) a test day leaves out the groups already known to be
compromised: those with fraud during training or during the delay days before it, as the
handbook does (a bank has blocked those cards; scoring them again flatters the model).

Inputs are arrays (feature matrix, labels, event times in ms); days are UTC days of DAY_MS.
Everything is deterministic for deterministic fitting functions.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Generic, TypeVar

import numpy as np

from app.scoring.dataset import DAY_MS
from app.scoring.gbt import GbtParams, fit_lgbm, predict_proba

log = logging.getLogger(__name__)

Candidate = TypeVar("Candidate")
#: (training rows, their labels, test rows, candidate) → a score per test row (higher: fraud).
FitScore = Callable[[np.ndarray, np.ndarray, np.ndarray, Candidate], np.ndarray]
_ISO_DAY: Final = "%Y-%m-%d"


@dataclass(frozen=True, kw_only=True, slots=True)
class Windows:
    """Window lengths in days and the number of folds (the handbook's defaults: 7/7/7)."""

    train_days: int = 7
    delay_days: int = 7
    test_days: int = 7
    folds: int = 4

    def __post_init__(self) -> None:
        if min(self.train_days, self.test_days, self.folds) < 1 or self.delay_days < 0:
            raise ValueError("train_days, test_days and folds must be >= 1, delay_days >= 0")

    @property
    def span_days(self) -> int:
        """Days one fold covers, from its first training day to its last test day."""
        return self.train_days + self.delay_days + self.test_days


@dataclass(frozen=True, slots=True)
class Fold:
    """One fold's windows, half-open intervals of event time in ms; index 0 is the latest."""

    index: int
    train_start_ms: int
    train_end_ms: int
    test_start_ms: int
    test_end_ms: int

    def describe(self) -> dict[str, Any]:
        """The fold as a table row records it (UTC days)."""
        from datetime import UTC, datetime

        def day(ms: int) -> str:
            return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime(_ISO_DAY)

        return {"fold": self.index, "train": f"[{day(self.train_start_ms)}, "
                f"{day(self.train_end_ms)})", "test": f"[{day(self.test_start_ms)}, "
                f"{day(self.test_end_ms)})"}


@dataclass(frozen=True, slots=True)
class FoldScore:
    """One candidate on one fold: the rows on each side and the test rows' average precision
    (None when the fold cannot be scored: no fraud in its test rows, or one class in training)."""

    candidate: int
    fold: Fold
    train_rows: int
    train_positives: int
    test_rows: int
    test_positives: int
    average_precision: float | None


@dataclass(frozen=True, slots=True)
class SearchResult(Generic[Candidate]):
    """Every candidate's fold scores and the best candidate (highest mean average precision;
    the earlier candidate of the grid on a tie)."""

    candidates: tuple[Candidate, ...]
    folds: tuple[Fold, ...]
    scores: tuple[FoldScore, ...]
    best_index: int

    @property
    def best(self) -> Candidate:
        """The chosen candidate."""
        return self.candidates[self.best_index]

    def mean_average_precision(self, candidate: int) -> float:
        """Mean average precision of a candidate over its scored folds (nan: none scored)."""
        values = [s.average_precision for s in self.scores
                  if s.candidate == candidate and s.average_precision is not None]
        return float(np.mean(values)) if values else math.nan

    def table(self) -> list[dict[str, Any]]:
        """One row per candidate: its parameters, mean and std of AP, and AP per fold."""
        rows = []
        for i, candidate in enumerate(self.candidates):
            values = [s.average_precision for s in self.scores if s.candidate == i]
            scored = [v for v in values if v is not None]
            rows.append({
                "candidate": i, "params": _as_dict(candidate),
                "mean_ap": self.mean_average_precision(i),
                "std_ap": float(np.std(scored)) if scored else math.nan,
                "folds_scored": len(scored), "ap_per_fold": values, "best": i == self.best_index,
            })
        return rows


def param_grid(base: GbtParams, **choices: Sequence[Any]) -> list[GbtParams]:
    """Every combination of the given values over `base` (the last name varies fastest)."""
    names = list(choices)
    return [replace(base, **dict(zip(names, values, strict=True)))
            for values in itertools.product(*(choices[n] for n in names))]


def prequential_folds(
    ts_ms: np.ndarray, windows: Windows = Windows(), *, start_ms: int | None = None
) -> list[Fold]:
    """The folds, latest first. `start_ms`: the latest fold's first training ms [default: the
    UTC midnight from which its test window ends with the last event's day]."""
    if len(ts_ms) == 0:
        raise ValueError("no rows to validate on")
    first_day = int(ts_ms.min()) // DAY_MS * DAY_MS
    if start_ms is None:
        end = int(ts_ms.max()) // DAY_MS * DAY_MS + DAY_MS
        start_ms = end - windows.span_days * DAY_MS
    folds = []
    for k in range(windows.folds):
        start = start_ms - k * windows.test_days * DAY_MS
        if start < first_day:
            days = (int(ts_ms.max()) - first_day) // DAY_MS + 1
            raise ValueError(
                f"fold {k} would start before the first event: {days} days of data hold "
                f"{k} folds of {windows.train_days}+{windows.delay_days}+{windows.test_days} "
                f"days shifted by {windows.test_days}")
        train_end = start + windows.train_days * DAY_MS
        test_start = train_end + windows.delay_days * DAY_MS
        folds.append(Fold(k, start, train_end, test_start,
                          test_start + windows.test_days * DAY_MS))
    return folds


def fold_rows(
    ts_ms: np.ndarray, fold: Fold, *, labels: np.ndarray | None = None,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(training mask, test mask) of a fold. With `groups` (and `labels`), test day d leaves out
    the groups with fraud in [train start, train end + d days), as the handbook does."""
    train = (ts_ms >= fold.train_start_ms) & (ts_ms < fold.train_end_ms)
    test = (ts_ms >= fold.test_start_ms) & (ts_ms < fold.test_end_ms)
    if groups is None:
        return train, test
    if labels is None:
        raise ValueError("leaving out known compromised groups needs the labels")
    fraud = labels == 1
    test_day = (ts_ms - fold.test_start_ms) // DAY_MS
    for day in np.unique(test_day[test]):
        known_until = fold.train_end_ms + int(day) * DAY_MS
        known = np.unique(groups[fraud & (ts_ms >= fold.train_start_ms) & (ts_ms < known_until)])
        today = test & (test_day == day)
        test &= ~(today & np.isin(groups, known))
    return train, test


def lgbm_fit_score(*, seed: int = 0) -> FitScore[GbtParams]:
    """The default fitting function: LightGBM with a GbtParams candidate, library scores."""

    def fit_score(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                  params: GbtParams) -> np.ndarray:
        return predict_proba(fit_lgbm(x_train, y_train, params, seed=seed,
                                      spec=_spec(x_train.shape[1])), x_test)

    return fit_score


def prequential_search(
    matrix: np.ndarray, labels: np.ndarray, ts_ms: np.ndarray, grid: Sequence[Candidate], *,
    windows: Windows = Windows(), start_ms: int | None = None,
    groups: np.ndarray | None = None, fit_score: FitScore[Candidate] | None = None,
    seed: int = 0,
) -> SearchResult[Candidate]:
    """Fit and test every candidate of `grid` on every prequential fold; the best by mean AP.

    `matrix` float32 [N, F] (FEATURE_NAMES order for the default fitting function), `labels`
    0/1 [N], `ts_ms` event times [N]. `fit_score` defaults to LightGBM (`grid` of GbtParams,
    fitted with `seed`). ValueError when no fold has both classes in training and fraud in test.
    """
    from sklearn.metrics import average_precision_score

    if not grid:
        raise ValueError("the grid is empty")
    if not (len(matrix) == len(labels) == len(ts_ms)):
        raise ValueError(f"rows {len(matrix)}, labels {len(labels)} and times {len(ts_ms)} "
                         "must have one entry per row")
    fit = fit_score if fit_score is not None else lgbm_fit_score(seed=seed)
    folds = prequential_folds(ts_ms, windows, start_ms=start_ms)
    masks = [fold_rows(ts_ms, f, labels=labels, groups=groups) for f in folds]
    scores: list[FoldScore] = []
    for i, candidate in enumerate(grid):
        for fold, (train, test) in zip(folds, masks, strict=True):
            y_train, y_test = labels[train], labels[test]
            ap = None
            if y_test.sum() > 0 and 0 < y_train.sum() < len(y_train):
                predicted = fit(matrix[train], y_train, matrix[test], candidate)
                ap = float(average_precision_score(y_test, predicted))
            scores.append(FoldScore(i, fold, int(len(y_train)), int(y_train.sum()),
                                    int(len(y_test)), int(y_test.sum()), ap))
        log.info("prequential candidate %d/%d: %s", i + 1, len(grid),
                 ", ".join(f"{s.average_precision:.4f}" if s.average_precision is not None
                           else "-" for s in scores[-len(folds):]))
    result = SearchResult(tuple(grid), tuple(folds), tuple(scores), 0)
    means = [result.mean_average_precision(i) for i in range(len(grid))]
    if all(math.isnan(m) for m in means):
        raise ValueError("no fold has both classes in its training days and fraud in its test "
                         "days: use a longer log or shorter windows")
    best = max(range(len(grid)), key=lambda i: (-math.inf if math.isnan(means[i]) else means[i],
                                                -i))
    return replace(result, best_index=best)


def _as_dict(candidate: Any) -> Any:
    as_dict = getattr(candidate, "as_dict", None)
    return as_dict() if callable(as_dict) else candidate


def _spec(width: int) -> Any:
    """The declared spec when the matrix is declaration-wide, else placeholder names f0.."""
    from app.scoring.contract import DECLARED, FeatureSpec

    if width == DECLARED.width:
        return DECLARED
    names = tuple(f"f{j}" for j in range(width))
    return FeatureSpec(names, dict.fromkeys(names, "float64"))
