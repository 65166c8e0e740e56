"""Drift as `fraudstream watch` shows it: PSI of the workers' summed window counts (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from app.drift.psi import Level, level, psi
from app.watch.samples import Samples

WINDOWS: tuple[str, ...] = ("1h", "24h")


@dataclass(frozen=True, slots=True)
class DriftRow:
    """One series (a feature or `score`): its PSI per window over all workers."""

    series: str
    psi: dict[str, float]
    levels: dict[str, Level]


@dataclass(frozen=True, slots=True)
class DriftView:
    """Every series, worst first, with the thresholds and events they were judged by."""

    rows: list[DriftRow]
    events: dict[str, int]
    watch: float
    alert: float
    models: list[str]

    @property
    def worst(self) -> Level:
        found = {lv for r in self.rows for lv in r.levels.values()}
        for lv in ("alert", "watch", "ok"):
            if lv in found:
                return lv  # type: ignore[return-value]
        return "n/a"


def _bins(samples: Samples, name: str, **match: str) -> list[float]:
    by_bin = samples.by_label(name, "bin", **match)
    return [by_bin[str(b)] for b in range(len(by_bin))]


def drift_view(samples: Samples, *, min_events: int, watch: float = 0.1,
               alert: float = 0.25) -> DriftView | None:
    """PSI per series and window from the workers' pages added up (parse sums them), against
    the reference they export, judged by the `watch`/`alert` thresholds (settings); None when
    no worker counts drift."""
    models = samples.get("fraudstream_drift_reference_info")
    workers = sum(models.values())
    if workers <= 0:
        return None
    n = workers  # each worker exports the same reference: the sum is `workers` copies of it
    events = {w: int(samples.total("fraudstream_drift_window_events", window=w)) for w in WINDOWS}
    features = sorted(samples.by_label("fraudstream_drift_feature_reference_count", "feature"))
    rows = []
    for series in (*features, "score"):
        if series == "score":
            ref = _bins(samples, "fraudstream_drift_score_reference_count")
        else:
            ref = _bins(samples, "fraudstream_drift_feature_reference_count", feature=series)
        ref = [c / n for c in ref]
        values: dict[str, float] = {}
        for w in WINDOWS:
            if series == "score":
                counts = _bins(samples, "fraudstream_drift_score_count", window=w)
            else:
                counts = _bins(samples, "fraudstream_drift_feature_count", feature=series,
                               window=w)
            enough = events[w] >= min_events and len(counts) == len(ref)
            values[w] = psi(ref, counts) if enough else float("nan")
        rows.append(DriftRow(series, values, {w: level(v, watch=watch, alert=alert)
                                              for w, v in values.items()}))
    order = {"alert": 0, "watch": 1, "ok": 2, "n/a": 3}
    rows.sort(key=lambda r: (min(order[lv] for lv in r.levels.values()),
                             -max((v for v in r.psi.values() if v == v), default=0.0)))
    return DriftView(rows, events, watch, alert,
                     sorted(dict(k).get("model_version", "?") for k in models))
