"""Drift counting: PSI, the event-time window's order independence, the reference in the card."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.drift.monitor import DriftMonitor, WindowSpec
from app.drift.psi import level, psi
from app.drift.window import SlotWindow
from app.features.declaration import FEATURE_NAMES
from app.scoring.drift_reference import (
    DriftReference,
    NoReferenceError,
    build_reference,
    quantile_bins,
)


def test_psi_is_zero_for_the_reference_itself_and_grows_with_the_shift() -> None:
    ref = [100, 200, 300, 400]
    assert psi(ref, ref) == pytest.approx(0.0, abs=1e-12)
    assert psi(ref, [10, 20, 30, 40]) == pytest.approx(0.0, abs=1e-3)
    small, large = psi(ref, [120, 200, 300, 380]), psi(ref, [400, 300, 200, 100])
    assert 0 < small < 0.1 < 0.25 < large
    assert math.isnan(psi(ref, [0, 0, 0, 0]))
    with pytest.raises(ValueError, match="bins"):
        psi(ref, [1, 2, 3])


def test_psi_levels() -> None:
    assert [level(v, watch=0.1, alert=0.25) for v in (0.05, 0.1, 0.2, 0.25, math.nan)] == [
        "ok", "watch", "watch", "alert", "n/a"]


def test_quantile_bins_merge_ties_and_count_every_value() -> None:
    values = np.array([1, 1, 1, 1, 1, 1, 2, 3, 4, 5], dtype=np.float32)
    bins = quantile_bins(values, 10)
    assert bins.edges == tuple(sorted(set(bins.edges)))
    assert 1.0 in bins.edges and sum(bins.counts) == 10
    assert bins.counts[0] == 0  # nothing below the smallest value's edge
    assert bins.index(np.array([0.5, 1.0, 5.0, 99.0])).tolist()[0] == 0


def _window(slots: int = 4) -> SlotWindow:
    return SlotWindow(name="w", slot_ms=10, slots=slots, cells=3)


def test_window_counts_the_final_window_whatever_the_order_and_batching() -> None:
    rng = np.random.default_rng(3)
    ts = rng.integers(0, 200, 500).astype(np.int64)
    cells = rng.integers(0, 3, (500, 1)).astype(np.int64)
    one = _window()
    one.add(ts, cells)
    order = rng.permutation(500)
    many = _window()
    for chunk in np.array_split(order, 37):
        many.add(ts[chunk], cells[chunk])
    assert one.counts().tolist() == many.counts().tolist()
    # by definition: the events whose 10 ms slot is among the last 4 up to the newest's
    head = int(ts.max()) // 10
    inside = ts // 10 > head - 4
    expected = np.bincount(cells[inside, 0], minlength=3)
    assert one.counts().tolist() == expected.tolist()
    assert one.end_ms == (head + 1) * 10


def test_window_drops_events_older_than_itself_and_clears_passed_slots() -> None:
    w = _window()
    w.add(np.array([100]), np.array([[1]]))
    w.add(np.array([50]), np.array([[2]]))  # 5 slots before the watermark: not counted
    assert w.counts().tolist() == [0, 1, 0]
    w.add(np.array([140]), np.array([[0]]))  # the window moved past slot 10
    assert w.counts().tolist() == [1, 0, 0]


def _reference(rows: int = 2000) -> tuple[DriftReference, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    matrix = rng.gamma(2.0, 3.0, (rows, len(FEATURE_NAMES))).astype(np.float32)
    scores = rng.beta(0.5, 8.0, rows).astype(np.float32)
    return build_reference(matrix, scores, source="test"), matrix, scores


def test_reference_round_trips_through_the_card() -> None:
    ref, _, _ = _reference()
    card = {"drift_reference": ref.to_json()}
    assert DriftReference.of_card(card, "v1") == ref


def test_a_card_without_reference_says_how_to_compute_it() -> None:
    with pytest.raises(NoReferenceError, match=r"fraudstream model reference --model v1 --events"):
        DriftReference.of_card({}, "v1")
    with pytest.raises(NoReferenceError, match="unusable"):
        DriftReference.of_card({"drift_reference": {"features": {}}}, "v1")


def test_monitor_psi_is_small_on_the_reference_rows_and_large_on_shifted_ones() -> None:
    ref, matrix, scores = _reference()
    spec = (WindowSpec("all", 1_000, 10),)
    same = DriftMonitor(ref, "v", windows=spec)
    same.observe(matrix, scores, np.zeros(len(scores), dtype=np.int64))
    state = same.state("all")
    assert state.events == len(scores)
    assert max(state.psi.values()) < 0.01
    shifted = DriftMonitor(ref, "v", windows=spec)
    shifted.observe(matrix * 3, np.minimum(scores * 4, 1), np.zeros(len(scores), dtype=np.int64))
    assert min(shifted.state("all").psi.values()) > 0.25


def test_monitor_reports_nan_below_the_minimum_events() -> None:
    ref, matrix, scores = _reference()
    monitor = DriftMonitor(ref, "v", min_events=50)
    monitor.observe(matrix[:10], scores[:10], np.full(10, 1_000, dtype=np.int64))
    assert all(math.isnan(v) for v in monitor.state("1h").psi.values())


def test_monitor_bins_every_value_as_the_reference_bins_do() -> None:
    ref, matrix, scores = _reference()
    # values exactly on the edges too (a value equal to an edge belongs to the bin above it)
    on_edges = np.array([[bins.edges[i % len(bins.edges)] for _, bins in ref.series[:-1]]
                         for i in range(40)], dtype=np.float32)
    matrix = np.concatenate([matrix, on_edges])
    scores = np.concatenate([scores, np.full(40, ref.series[-1][1].edges[0], np.float32)])
    monitor = DriftMonitor(ref, "v", windows=(WindowSpec("all", 1_000, 10),))
    monitor.observe(matrix, scores, np.zeros(len(scores), dtype=np.int64))
    counts = monitor.state("all").counts
    for j, (name, bins) in enumerate(ref.series):
        column = matrix[:, j] if j < matrix.shape[1] else scores
        assert counts[name] == np.bincount(bins.index(column), minlength=bins.size).tolist()


def test_psi_equals_hand_computed_values() -> None:
    # [1, 1] against [3, 1], smoothing 0.5: expected shares (0.5, 0.5), actual (0.7, 0.3);
    # 0.2 * ln(0.7 / 0.5) + (-0.2) * ln(0.3 / 0.5) = 0.0672944... + 0.1021651... = 0.1694596
    assert psi([1, 1], [3, 1]) == pytest.approx(0.16945957, abs=1e-8)
    # [10, 0, 30] against [0, 20, 20]: shares (10.5, 0.5, 30.5) / 41.5 and (0.5, 20.5, 20.5) /
    # 41.5; terms 0.7336140 + 1.7896718 + 0.0957427 = 2.6190285
    assert psi([10, 0, 30], [0, 20, 20]) == pytest.approx(2.6190285, abs=1e-6)
