"""Evaluation metrics agree with scikit-learn; thresholds follow the documented rule."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from app.scoring.evaluation import at_threshold, choose_thresholds, pr_auc, roc_auc


def test_auc_figures_match_sklearn_with_ties() -> None:
    rng = np.random.default_rng(5)
    labels = (rng.random(3_000) < 0.05).astype(np.int64)
    scores = np.round(rng.random(3_000) * 0.6 + labels * 0.3, 2).astype(np.float32)  # many ties
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert pr_auc(scores, labels) == pytest.approx(average_precision_score(labels, scores),
                                                   abs=1e-12)


def test_thresholds_follow_precision_and_recall_targets() -> None:
    #            positives at 0.9 0.8 0.6 0.3 ; negatives at 0.7 0.5 0.2 0.1
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.3, 0.2, 0.1], dtype=np.float32)
    labels = np.array([1, 1, 0, 1, 0, 1, 0, 0])
    chosen = choose_thresholds(scores, labels, freeze_precision=0.75, alert_recall=1.0)
    assert chosen.freeze == float(np.float32(0.6))  # 3/4 precision, the lowest such score
    assert chosen.alert == float(np.float32(0.3))  # highest score catching every fraud
    assert chosen.freeze_target_met
    at = at_threshold(scores, labels, chosen.freeze)
    assert (at["flagged"], at["true_positives"], at["precision"], at["recall"]) == (4, 3, 0.75,
                                                                                     0.75)
    # alert is capped at freeze when freeze already reaches the recall target
    capped = choose_thresholds(scores, labels, freeze_precision=0.6, alert_recall=0.5)
    assert capped.alert == capped.freeze == float(np.float32(0.3))
    # an unreachable precision falls back to the best precision and says so
    hard = choose_thresholds(scores[2:], labels[2:], freeze_precision=0.99, alert_recall=0.5)
    assert not hard.freeze_target_met and hard.freeze == float(np.float32(0.3))  # 2/4


def test_one_class_evaluation_is_refused() -> None:
    with pytest.raises(ValueError, match="both classes"):
        choose_thresholds(np.ones(4, dtype=np.float32), np.zeros(4, dtype=np.int64),
                          freeze_precision=0.9, alert_recall=0.9)
