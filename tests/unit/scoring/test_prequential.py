"""Prequential validation: fold windows, known-compromised groups, the search picks the signal."""

from __future__ import annotations

import numpy as np
import pytest

from app.scoring.contract import DECLARED
from app.scoring.dataset import DAY_MS
from app.scoring.gbt import GbtParams
from app.scoring.prequential import (
    Windows,
    fold_rows,
    param_grid,
    prequential_folds,
    prequential_search,
)

T0 = 20_000 * DAY_MS  # a UTC midnight


def _synthetic(days: int, per_day: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows over `days` days whose fraud depends on column 0 (noisy) and nothing else."""
    rng = np.random.default_rng(seed)
    rows = days * per_day
    ts = np.sort(T0 + rng.integers(0, days * DAY_MS, rows))
    matrix = rng.normal(size=(rows, DECLARED.width)).astype(np.float32)
    labels = (matrix[:, 0] + rng.normal(0, 0.7, rows) > 2.0).astype(np.int64)
    return matrix, labels, ts


def test_folds_follow_the_handbook_windows() -> None:
    ts = np.array([T0 + 5, T0 + 35 * DAY_MS - 1])  # 35 days
    folds = prequential_folds(ts, Windows(folds=3))
    latest = folds[0]
    assert latest.test_end_ms == T0 + 35 * DAY_MS
    assert latest.test_start_ms - latest.train_end_ms == 7 * DAY_MS
    assert latest.train_end_ms - latest.train_start_ms == 7 * DAY_MS
    assert [f.train_start_ms for f in folds] == [T0 + (14 - 7 * k) * DAY_MS for k in range(3)]
    assert folds[2].train_start_ms == T0
    assert folds[0].describe()["train"].startswith("[")
    with pytest.raises(ValueError, match="before the first event"):
        prequential_folds(ts, Windows(folds=4))
    shorter = prequential_folds(ts, Windows(train_days=3, delay_days=0, test_days=1, folds=5),
                                start_ms=T0 + 4 * DAY_MS)
    assert [f.test_start_ms for f in shorter] == [T0 + (7 - k) * DAY_MS for k in range(5)]
    assert shorter[-1].train_start_ms == T0


def test_known_compromised_groups_leave_the_test_days() -> None:
    fold = prequential_folds(np.array([T0, T0 + 21 * DAY_MS - 1]), Windows(folds=1))[0]
    ts = np.array([T0 + DAY_MS,              # card a: fraud while training
                   T0 + 8 * DAY_MS,          # card b: fraud on the 2nd delay day
                   T0 + 14 * DAY_MS,         # a, first test day: known, left out
                   T0 + 14 * DAY_MS + 1,     # b, first test day: not known yet, kept
                   T0 + 16 * DAY_MS,         # b, third test day: known since day 2, left out
                   T0 + 16 * DAY_MS + 1])    # c: never fraud, kept
    groups = np.array(["a", "b", "a", "b", "b", "c"])
    labels = np.array([1, 1, 0, 0, 0, 0])
    train, test = fold_rows(ts, fold)
    assert train.tolist() == [True, False, False, False, False, False]
    assert test.tolist() == [False, False, True, True, True, True]
    _, test = fold_rows(ts, fold, labels=labels, groups=groups)
    assert test.tolist() == [False, False, False, True, False, True]


def test_search_picks_the_informative_candidate_with_any_fitting_function() -> None:
    matrix, labels, ts = _synthetic(days=28, per_day=150, seed=4)

    def column_as_score(x_train, y_train, x_test, column: int) -> np.ndarray:
        return x_test[:, column]

    result = prequential_search(matrix, labels, ts, [3, 0, 1], windows=Windows(folds=2),
                                fit_score=column_as_score)
    assert result.best == 0 and result.best_index == 1
    table = result.table()
    assert [row["candidate"] for row in table] == [0, 1, 2]
    assert all(row["folds_scored"] == 2 and len(row["ap_per_fold"]) == 2 for row in table)
    assert table[1]["best"] and table[1]["mean_ap"] > 2 * table[0]["mean_ap"]
    assert all(s.test_rows > 0 and s.train_rows > 0 for s in result.scores)


def test_search_with_lightgbm_ranks_a_real_model_above_a_stump() -> None:
    matrix, labels, ts = _synthetic(days=28, per_day=150, seed=5)
    grid = param_grid(GbtParams(n_estimators=20, num_leaves=7), learning_rate=[1e-6, 0.1])
    assert [p.learning_rate for p in grid] == [1e-6, 0.1]
    stump = GbtParams(n_estimators=1, num_leaves=2, min_child_samples=1_000)
    result = prequential_search(matrix, labels, ts, [stump, *grid], windows=Windows(folds=2))
    assert result.best == grid[1]
    assert result.table()[2]["params"]["learning_rate"] == 0.1
    assert 0.0 < result.mean_average_precision(0) < result.mean_average_precision(2) <= 1.0


def test_search_refuses_folds_without_fraud() -> None:
    matrix, labels, ts = _synthetic(days=21, per_day=20, seed=6)
    with pytest.raises(ValueError, match="no fold"):
        prequential_search(matrix, np.zeros_like(labels), ts, [0], windows=Windows(folds=1),
                           fit_score=lambda a, b, x, c: x[:, c])
