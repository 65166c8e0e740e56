"""Drift offline: a model's reference rebuilt from its training set, and the drift of a log
computed with the workers' monitor over the same features and scores."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from app.drift.monitor import DriftMonitor
from app.features.offline import OfflineResult
from app.scoring.dataset import labelled_rows
from app.scoring.drift_reference import DriftReference, build_reference
from app.scoring.registry import LoadedModel


def reference_of_training_set(model: LoadedModel, table: Any, *, source: str) -> DriftReference:
    """The reference `train` would have written for `model`: its card's split boundary picks
    the training rows of the training table `table`, which must be the card's (fingerprint)."""
    card: Mapping[str, Any] = model.card.raw
    data = card.get("data", {})
    rows = labelled_rows(table)
    expected = data.get("fingerprint")
    if expected is not None and rows.fingerprint != expected:
        raise ValueError(f"this is not the training set of {model.version}: fingerprint "
                         f"{rows.fingerprint[:19]}… is not the card's {str(expected)[:19]}… "
                         "(same log, labels, lateness and --now as `model train` had?)")
    boundary = data.get("split", {}).get("boundary_ts_ms")
    train = rows.ts_ms < boundary if isinstance(boundary, int) else np.ones(len(rows.ts_ms), bool)
    matrix = rows.matrix[train]
    return build_reference(matrix, model.scorer.score(matrix), source=source)


def drift_of_features(model: LoadedModel, reference: DriftReference, offline: OfflineResult,
                      scores: np.ndarray, *, until_ms: int | None = None,
                      min_events: int = 1) -> DriftMonitor:
    """The monitor after counting every accepted row of `offline` (optionally only those with
    ts_ms < until_ms) with its scores: what a worker that served them holds."""
    from app.features.declaration import FEATURE_NAMES
    from app.scoring.scorer import features_matrix

    monitor = DriftMonitor(reference, model.version, min_events=min_events)
    table = offline.table
    ts = table.column("ts_ms").to_numpy().astype(np.int64)
    keep = np.ones(len(ts), dtype=bool) if until_ms is None else ts < until_ms
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        return monitor
    picked = table.take(rows)
    columns = [picked.column(n).to_pylist() for n in FEATURE_NAMES]
    matrix = features_matrix(list(zip(*columns, strict=True)))
    monitor.observe(matrix, scores[rows], ts[rows])
    return monitor
