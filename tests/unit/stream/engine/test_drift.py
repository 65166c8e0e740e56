"""DriftStage: no reference (nothing counted), redelivered rows left out, counts equal to bins
recomputed from the card's edges, and a model switch starting fresh windows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from app.features.declaration import FEATURE_NAMES
from app.scoring.drift_reference import CARD_KEY, DriftReference
from app.scoring.registry import ModelRegistry
from app.settings import load_settings
from app.stream.engine.drift import DriftStage

T0 = 1_767_225_600_000


def _rows(n: int, redelivered: set[int]) -> list[SimpleNamespace]:
    return [SimpleNamespace(txn=SimpleNamespace(ts_ms=T0 + i * 1000), redelivered=i in redelivered)
            for i in range(n)]


def _stage() -> tuple[DriftStage, object]:
    settings = load_settings({}, drift=True, drift_min_events=1)
    model = ModelRegistry(settings.model_dir, device="cpu").load(settings.model_version)
    stage = DriftStage(settings)
    stage.install(model)
    return stage, model


def test_a_model_without_reference_counts_nothing() -> None:
    stage, model = _stage()
    raw = {k: v for k, v in model.card.raw.items() if k != CARD_KEY}  # type: ignore[attr-defined]
    stage.install(SimpleNamespace(card=SimpleNamespace(raw=raw), version="bare"))  # type: ignore[arg-type]
    assert stage.monitor is None
    stage.observe(_rows(3, set()), np.zeros((3, len(FEATURE_NAMES)), np.float32), np.zeros(3))


def test_redelivered_rows_are_not_counted_and_bins_follow_the_cards_edges() -> None:
    stage, model = _stage()
    rng = np.random.default_rng(4)
    n = 50
    matrix = rng.gamma(2.0, 3.0, (n, len(FEATURE_NAMES))).astype(np.float32)
    scores = rng.random(n)
    again = {3, 17, 40}
    stage.observe(_rows(n, again), matrix, scores)
    state = stage.monitor.state("24h")  # type: ignore[union-attr]
    assert state.events == n - len(again)
    reference = DriftReference.of_card(model.card.raw, model.version)  # type: ignore[attr-defined]
    fresh = np.array([i not in again for i in range(n)])
    for j, (name, bins) in enumerate(reference.series):
        values = (scores if j == len(FEATURE_NAMES) else matrix[:, j]).astype(np.float64)[fresh]
        # bin = number of edges <= value (the card's bins_rule), recomputed here
        index = np.searchsorted(np.asarray(bins.edges, dtype=np.float64), values, side="right")
        want = np.bincount(index, minlength=bins.size).tolist()
        assert state.counts[name] == want, name


def test_a_model_switch_starts_fresh_windows() -> None:
    stage, model = _stage()
    stage.observe(_rows(5, set()), np.ones((5, len(FEATURE_NAMES)), np.float32), np.ones(5))
    assert stage.monitor.state("1h").events == 5  # type: ignore[union-attr]
    stage.install(model)  # type: ignore[arg-type]
    assert stage.monitor.state("1h").events == 0  # type: ignore[union-attr]
