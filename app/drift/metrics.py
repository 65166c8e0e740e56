"""The worker's drift metrics, read from the live monitor when Prometheus scrapes (nothing is
set on the scoring path).

Per worker: its window counts (`fraudstream_drift_feature_count`, `..._score_count`; sum them
across workers), the reference counts, the events in each window and this worker's PSI
(`fraudstream_feature_psi{feature,window}`, `fraudstream_score_psi{window}`). The PSI of all
workers together is computed from the summed counts by the recording rules in
deploy/prometheus/rules/drift.yml (and by `fraudstream watch`) with the same formula.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from app.drift.monitor import DriftMonitor
from app.scoring.drift_reference import SCORE


class DriftCollector(Collector):
    """Exposes the monitor it currently holds (none: only the thresholds).

    `collect` gives the families to a registry; `exposition` writes the same text that
    `generate_latest` makes of them, about 20 times faster (the worker's /metrics: with 42
    features the drift families are ~900 of its ~1,200 samples, 10-15 ms a scrape through
    prometheus_client, every fetched event waiting behind it). The label sets and the
    reference families are written once per monitor, only the counts and PSI per call."""

    def __init__(self) -> None:
        self.monitor: DriftMonitor | None = None
        self.watch = 0.1
        self.alert = 0.25
        self._layout: tuple[DriftMonitor | None, _Layout] | None = None

    def exposition(self) -> bytes:
        """`generate_latest` of a registry holding only this collector, byte for byte."""
        monitor = self.monitor
        if self._layout is None or self._layout[0] is not monitor:
            self._layout = (monitor, _Layout(monitor, self._families(monitor)))
        layout = self._layout[1]
        head = generate_latest(_Only(self._head(monitor)))
        if monitor is None:
            return head + layout.empty
        out: list[str] = []
        states = [monitor.state(name) for name in monitor.windows]
        f_count: list[str] = []
        s_count: list[str] = []
        f_psi: list[str] = []
        s_psi: list[str] = []
        events: list[str] = []
        for w, state in enumerate(states):
            events.append(layout.events[w] + _go(state.events))
            for j, (series, counts) in enumerate(state.counts.items()):
                labels = layout.counts[w][j]
                target = s_count if series == SCORE else f_count
                target.extend(label + _go(c) for label, c in zip(labels, counts, strict=True))
                (s_psi if series == SCORE else f_psi).append(
                    layout.psi[w][j] + floatToGoString(state.psi[series]) + "\n")
        for header, lines in zip(layout.headers, (f_count, s_count, f_psi, s_psi, events),
                                 strict=True):
            out.append(header)
            out.extend(lines)
        return head + "".join(out).encode() + layout.reference

    def collect(self) -> Iterator[Any]:
        yield from self._head(self.monitor)
        yield from self._families(self.monitor)

    def _head(self, monitor: DriftMonitor | None) -> list[Any]:
        thresholds = GaugeMetricFamily(
            "fraudstream_drift_psi_threshold", "PSI thresholds: watch and alert (settings).",
            labels=["level"])
        thresholds.add_metric(["watch"], self.watch)
        thresholds.add_metric(["alert"], self.alert)
        info = GaugeMetricFamily("fraudstream_drift_reference_info",
                                 "The model whose reference drift is counted against (1).",
                                 labels=["model_version"])
        if monitor is not None:
            info.add_metric([monitor.version], 1)
        return [thresholds, info]

    @staticmethod
    def _families(monitor: DriftMonitor | None) -> list[Any]:
        """The counted families, then the reference's (see `_Layout` for their order)."""
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
        return [f_count, s_count, f_psi, s_psi, events, f_ref, s_ref]


class _Only:
    """Families as a registry `generate_latest` takes."""

    def __init__(self, families: Iterable[Any]) -> None:
        self._families = families

    def collect(self) -> Iterable[Any]:
        return self._families


@lru_cache(maxsize=1 << 16)
def _go(count: int) -> str:
    """A count as the exposition writes it (counts repeat: cached)."""
    return floatToGoString(count) + "\n"


class _Layout:
    """What a monitor's exposition writes the same every time: the families' header lines,
    each sample's name and labels, the reference families whole, and the families of no
    monitor. Taken from the families themselves (`DriftCollector._families`), written once
    by `generate_latest`, so the text is prometheus_client's."""

    def __init__(self, monitor: DriftMonitor | None, families: list[Any]) -> None:
        self.empty = generate_latest(_Only(families)) if monitor is None else b""
        counted, reference = families[:5], families[5:]
        self.reference = generate_latest(_Only(reference))
        # every counted family written once with its samples' values cut off: the header
        # lines, then one `name{labels} ` prefix per sample, in the families' sample order
        self.headers: list[str] = []
        prefixes: list[list[str]] = []
        for family in counted:
            text = generate_latest(_Only([family])).decode().splitlines(keepends=True)
            self.headers.append("".join(text[:2]))
            prefixes.append([line.rsplit(" ", 1)[0] + " " for line in text[2:]])
        f_count, s_count, f_psi, s_psi, events = prefixes
        self.counts: list[list[list[str]]] = []
        self.psi: list[list[str]] = []
        self.events = events
        if monitor is None:
            return
        # the families hold, per window, per series: its bins (f_count or s_count) and its PSI
        for _ in monitor.windows:
            per_series: list[list[str]] = []
            psi: list[str] = []
            for series, bins in monitor.reference.series:
                source, psi_source = (s_count, s_psi) if series == SCORE else (f_count, f_psi)
                per_series.append([source.pop(0) for _ in range(bins.size)])
                psi.append(psi_source.pop(0))
            self.counts.append(per_series)
            self.psi.append(psi)


#: The process's collector: the worker's /metrics writes it after the default registry's
#: families (app.stream.pages), through `exposition`.
DRIFT_COLLECTOR = DriftCollector()


def drift_collector() -> DriftCollector:
    """The process's collector."""
    return DRIFT_COLLECTOR
