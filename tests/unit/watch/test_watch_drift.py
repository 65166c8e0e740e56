"""watch's drift table: PSI of two workers' pages added up equals PSI of all their rows."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from app.drift.metrics import DriftCollector
from app.drift.monitor import DriftMonitor
from app.features.declaration import FEATURE_NAMES
from app.scoring.drift_reference import build_reference
from app.watch.drift import drift_view
from app.watch.frame import Frame
from app.watch.render import render
from app.watch.samples import parse


def _page(monitor: DriftMonitor) -> str:
    collector = DriftCollector()
    collector.monitor = monitor
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_summed_pages_give_the_psi_of_all_rows_and_render() -> None:
    rng = np.random.default_rng(4)
    width = len(FEATURE_NAMES)
    train = rng.gamma(2.0, 3.0, (3000, width)).astype(np.float32)
    ref = build_reference(train, rng.beta(0.5, 8, 3000).astype(np.float32), source="t")
    live = (rng.gamma(2.0, 3.0, (1000, width)) * 1.5).astype(np.float32)
    scores = rng.beta(0.5, 8, 1000).astype(np.float32)
    ts = np.full(1000, 1_767_225_600_000, dtype=np.int64)
    workers = [DriftMonitor(ref, "v1", min_events=10) for _ in range(2)]
    workers[0].observe(live[:400], scores[:400], ts[:400])
    workers[1].observe(live[400:], scores[400:], ts[400:])
    together = DriftMonitor(ref, "v1", min_events=10)
    together.observe(live, scores, ts)
    view = drift_view(parse([_page(w) for w in workers]), min_events=10, watch=0.1, alert=0.25)
    assert view is not None and view.models == ["v1"]
    expected = together.state("1h")
    shown = {r.series: r for r in view.rows}
    for name in together.names:
        assert shown[name].psi["1h"] == expected.psi[name], name
    assert view.events["1h"] == 1000
    assert view.worst == "alert"
    frame = Frame(None, None, None, [], [], False, 0, 0, 0, 0, 0, [], 2, 2, True, drift=view)
    console = Console(width=100, record=True)
    console.print(render(frame, title="t"))
    text = console.export_text()
    assert "drift vs training reference of v1" in text and "PSI 1h" in text


def test_no_reference_means_no_drift_view() -> None:
    page = _page(None)  # type: ignore[arg-type]
    assert drift_view(parse([page]), min_events=1) is None
