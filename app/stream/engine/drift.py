"""The scoring stage's drift counting: served rows of the active model into its reference bins."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from app.drift.metrics import drift_collector
from app.drift.monitor import DriftMonitor
from app.scoring.drift_reference import DriftReference, NoReferenceError
from app.scoring.registry import LoadedModel
from app.settings import Settings
from app.stream.engine.pipeline import Scored

log = logging.getLogger(__name__)


class DriftStage:
    """Holds the active model's monitor; a model switch starts fresh windows (its bins)."""

    def __init__(self, settings: Settings) -> None:
        self.enabled = settings.drift
        self.min_events = settings.drift_min_events
        self.collector = drift_collector() if self.enabled else None
        if self.collector is not None:
            self.collector.watch = settings.drift_psi_watch
            self.collector.alert = settings.drift_psi_alert
        self.monitor: DriftMonitor | None = None

    def install(self, model: LoadedModel) -> None:
        """Count against `model`'s reference from now on (none: drift is not counted)."""
        self.monitor = None
        if self.enabled:
            try:
                reference = DriftReference.of_card(model.card.raw, model.version)
            except NoReferenceError as exc:
                log.warning("drift not counted: %s", exc)
            else:
                self.monitor = DriftMonitor(reference, model.version,
                                            min_events=self.min_events)
        if self.collector is not None:
            self.collector.monitor = self.monitor

    def observe(self, scored: Sequence[Scored], matrix: np.ndarray, scores: np.ndarray) -> None:
        """Count a scored batch; a redelivered row was counted the first time (or, after a
        restart, belongs to a window this process never saw), so it is left out."""
        monitor = self.monitor
        if monitor is None:
            return
        ts = np.fromiter([s.txn.ts_ms for s in scored], dtype=np.int64, count=len(scored))
        if not any(s.redelivered for s in scored):
            monitor.observe(matrix, scores, ts)
            return
        fresh = np.fromiter([not s.redelivered for s in scored], dtype=bool, count=len(scored))
        monitor.observe(matrix[fresh], scores[fresh], ts[fresh])
