"""The worker's drift metrics, read from the live monitor when Prometheus scrapes (nothing is
set on the scoring path).

Per worker: its window counts (`fraudstream_drift_feature_count`, `..._score_count`; sum them
across workers), the reference counts, the events in each window and this worker's PSI
(`fraudstream_feature_psi{feature,window}`, `fraudstream_score_psi{window}`). The PSI of all
workers together is computed from the summed counts by the recording rules in
deploy/prometheus/rules/drift.yml (and by `fraudstream watch`) with the same formula.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.drift.monitor import DriftMonitor
from app.scoring.drift_reference import SCORE


class DriftCollector(Collector):
    """Exposes the monitor it currently holds (none: only the thresholds)."""

    def __init__(self) -> None:
        self.monitor: DriftMonitor | None = None
        self.watch = 0.1
        self.alert = 0.25

    def collect(self) -> Iterator[Any]:
        thresholds = GaugeMetricFamily(
            "fraudstream_drift_psi_threshold", "PSI thresholds: watch and alert (settings).",
            labels=["level"])
        thresholds.add_metric(["watch"], self.watch)
        thresholds.add_metric(["alert"], self.alert)
        yield thresholds
        monitor = self.monitor
        info = GaugeMetricFamily("fraudstream_drift_reference_info",
                                 "The model whose reference drift is counted against (1).",
                                 labels=["model_version"])
        if monitor is not None:
            info.add_metric([monitor.version], 1)
        yield info
        f_count = GaugeMetricFamily(
            "fraudstream_drift_feature_count",
            "Served rows of this worker in each reference bin of each feature over the window.",
            labels=["feature", "window", "bin"])
        s_count = GaugeMetricFamily(
            "fraudstream_drift_score_count",
            "Served rows of this worker in each reference score bin over the window.",
            labels=["window", "bin"])
        f_psi = GaugeMetricFamily(
            "fraudstream_feature_psi",
            "PSI of the feature over the window against the training reference (this worker; "
            "NaN below FRAUDSTREAM_DRIFT_MIN_EVENTS).", labels=["feature", "window"])
        s_psi = GaugeMetricFamily(
            "fraudstream_score_psi",
            "PSI of the score over the window against the training reference (this worker).",
            labels=["window"])
        events = GaugeMetricFamily("fraudstream_drift_window_events",
                                   "Served rows of this worker in the window.", labels=["window"])
        # every family is declared even without a monitor (no model reference): a dashboard or
        # rule names only what a worker's page declares
        for name in (monitor.windows if monitor is not None else ()):
            state = monitor.state(name)
            events.add_metric([name], state.events)
            for series, counts in state.counts.items():
                for b, c in enumerate(counts):
                    if series == SCORE:
                        s_count.add_metric([name, str(b)], c)
                    else:
                        f_count.add_metric([series, name, str(b)], c)
                if series == SCORE:
                    s_psi.add_metric([name], state.psi[series])
                else:
                    f_psi.add_metric([series, name], state.psi[series])
        f_ref = GaugeMetricFamily("fraudstream_drift_feature_reference_count",
                                  "Training rows in each reference bin of each feature.",
                                  labels=["feature", "bin"])
        s_ref = GaugeMetricFamily("fraudstream_drift_score_reference_count",
                                  "Training rows in each reference score bin.", labels=["bin"])
        for series, bins in (monitor.reference.series if monitor is not None else ()):
            for b, c in enumerate(bins.counts):
                if series == SCORE:
                    s_ref.add_metric([str(b)], c)
                else:
                    f_ref.add_metric([series, str(b)], c)
        yield from (f_count, s_count, f_psi, s_psi, events, f_ref, s_ref)


#: The process's collector (the worker's registry, like app.stream.metrics' metrics).
DRIFT_COLLECTOR = DriftCollector()
REGISTRY.register(DRIFT_COLLECTOR)


def drift_collector() -> DriftCollector:
    """The process's collector."""
    return DRIFT_COLLECTOR
