"""Evaluation on the later days: ROC AUC, PR AUC, and thresholds chosen by precision and recall.

Threshold choice (documented in the model card):
- freeze: the lowest score whose flagged set (score ≥ t) has precision ≥ the freeze target
  (default 0.9), i.e. the most fraud caught while 9 in 10 freezes are right. When no threshold
  reaches the target, the one with the best precision (lowest such score) is used and the card
  says `freeze_target_met: false`.
- alert: the highest score whose flagged set still has recall ≥ the alert target (default 0.8),
  i.e. the fewest alerts that reach 80 % of fraud; capped at freeze (a freeze also alerts).
Candidate thresholds are the evaluation scores themselves (float32 values), so the card's
numbers are exactly what `score ≥ threshold` yields on those days.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Curve:
    """Flagged counts per candidate threshold (distinct scores, descending)."""

    thresholds: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    positives: int

    @property
    def precision(self) -> np.ndarray:
        """TP / flagged at each threshold."""
        return self.tp / (self.tp + self.fp)

    @property
    def recall(self) -> np.ndarray:
        """TP / positives at each threshold."""
        return self.tp / self.positives


def curve(scores: np.ndarray, labels: np.ndarray) -> Curve:
    """Cumulative TP/FP at every distinct score, highest first."""
    positives = int(labels.sum())
    if positives == 0 or positives == len(labels):
        raise ValueError(f"evaluation needs both classes: {positives} positives in {len(labels)} "
                         "rows (use a longer or larger log)")
    s = scores.astype(np.float64)
    order = np.argsort(-s, kind="stable")
    s, y = s[order], labels[order].astype(np.int64)
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # last index of each distinct score
    tp = np.cumsum(y)[last]
    fp = (last + 1) - tp
    return Curve(s[last], tp, fp, positives)


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (ties counted half), via the rank-sum statistic."""
    s = scores.astype(np.float64)
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    avg_rank = upper - (counts - 1) / 2.0  # 1-based average rank of each distinct value
    ranks = avg_rank[inverse]
    pos = labels.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("ROC AUC needs both classes")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def pr_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Average precision, Σ (R_k − R_{k−1}) P_k over distinct thresholds (as sklearn)."""
    c = curve(scores, labels)
    recall = c.recall
    return float(np.sum(np.diff(np.r_[0.0, recall]) * c.precision))


def at_threshold(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    """Precision, recall and counts of `score ≥ threshold`."""
    flagged = scores.astype(np.float64) >= threshold
    tp = int((flagged & (labels == 1)).sum())
    n = int(flagged.sum())
    positives = int((labels == 1).sum())
    return {
        "threshold": threshold,
        "flagged": n,
        "true_positives": tp,
        "precision": tp / n if n else None,
        "recall": tp / positives if positives else None,
    }


@dataclass(frozen=True, slots=True)
class ChosenThresholds:
    """The policy thresholds and whether the targets could be met."""

    freeze: float
    alert: float
    freeze_target_met: bool


def choose_thresholds(
    scores: np.ndarray, labels: np.ndarray, *, freeze_precision: float, alert_recall: float
) -> ChosenThresholds:
    """Freeze: lowest score with precision ≥ target; alert: highest with recall ≥ target."""
    c = curve(scores, labels)
    precision, recall = c.precision, c.recall
    ok = np.flatnonzero(precision >= freeze_precision)
    if len(ok):
        freeze, freeze_met = float(c.thresholds[ok[-1]]), True
    else:
        best = np.flatnonzero(precision == precision.max())
        freeze, freeze_met = float(c.thresholds[best[-1]]), False
    reach = np.flatnonzero(recall >= alert_recall)  # recall grows as the threshold falls
    alert = float(c.thresholds[reach[0]])  # reach is never empty: the lowest score has recall 1
    return ChosenThresholds(freeze, min(alert, freeze), freeze_met)
