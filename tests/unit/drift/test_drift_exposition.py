"""The drift families' fast exposition is prometheus_client's text of the same families."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from app.drift.metrics import DriftCollector
from app.drift.monitor import DriftMonitor
from app.features.declaration import FEATURE_NAMES
from app.scoring.drift_reference import build_reference


def _generated(collector: DriftCollector) -> bytes:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry)


def test_the_exposition_is_generate_latest_byte_for_byte() -> None:
    """No monitor, a monitor before and after more rows (its layout reused), counts past a
    million (Go's exponent form), NaN PSI below the minimum, a model version that needs escaping,
    and a switch to another monitor (a new layout)."""
    rng = np.random.default_rng(3)
    width = len(FEATURE_NAMES)
    reference = build_reference(rng.gamma(2.0, 3.0, (2000, width)).astype(np.float32),
                                rng.beta(0.5, 8, 2000).astype(np.float32), source="t")
    collector = DriftCollector()
    collector.watch, collector.alert = 0.15, 0.3
    assert collector.exposition() == _generated(collector)
    monitor = DriftMonitor(reference, 'v"1\\x', min_events=500)
    collector.monitor = monitor
    assert collector.exposition() == _generated(collector)  # empty windows: NaN PSI
    t0 = 1_767_225_600_000
    for batch in range(3):
        rows = rng.gamma(2.0, 3.0, (400, width)).astype(np.float32) * (1 + batch)
        ts = t0 + np.arange(400, dtype=np.int64) * 30_000 + batch * 3_600_000
        monitor.observe(rows, rng.beta(0.5, 8, 400).astype(np.float32), ts)
        page = collector.exposition()
        assert page == _generated(collector)
    assert b'fraudstream_drift_window_events{window="24h"} 1200.0' in page
    # a count past a million, put straight into the 24 h window's newest slot (counting a million
    # rows takes seconds and half a gigabyte)
    monitor.windows["24h"]._ring[-1, :] += 1_234_567  # noqa: SLF001
    page = collector.exposition()
    assert b"e+06" in page and page == _generated(collector)
    collector.monitor = DriftMonitor(reference, "v2", min_events=1)
    assert collector.exposition() == _generated(collector)
    collector.monitor = None
    assert collector.exposition() == _generated(collector)
