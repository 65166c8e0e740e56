"""The worker's collector settings and its pause histogram."""

from __future__ import annotations

import gc

from app.stream import collector, metrics


def _count(generation: int) -> tuple[float, float]:
    return metrics.GC_PAUSE.labels(str(generation))._sum.get(), sum(
        b.get() for b in metrics.GC_PAUSE.labels(str(generation))._buckets)


def test_a_pause_is_observed_in_its_generation_for_as_long_as_it_lasted() -> None:
    ticks = iter([10.0, 10.25])
    watch = collector.PauseWatch(clock=lambda: next(ticks))
    before = _count(1)
    watch("start", {"generation": 1, "collected": 0, "uncollectable": 0})
    watch("stop", {"generation": 1, "collected": 3, "uncollectable": 0})
    total, count = _count(1)
    assert count == before[1] + 1
    assert total - before[0] == 0.25


def test_tune_sets_the_thresholds_and_a_real_collection_is_measured() -> None:
    saved = gc.get_threshold()
    before = _count(2)[1]
    watch = collector.tune()
    try:
        assert gc.get_threshold() == collector.GC_THRESHOLDS
        gc.collect()
        assert _count(2)[1] == before + 1
    finally:
        gc.callbacks.remove(watch)
        gc.unfreeze()
        gc.set_threshold(*saved)
