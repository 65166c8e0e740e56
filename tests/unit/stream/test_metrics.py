"""observe_many: the same histogram as one observe per value."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from app.stream.metrics import observe_many

VALUES = [0.0, 0.0005, 0.0007, 0.001, 0.0011, 0.05, 0.049, 3.0, 31.0, 1e9, 0.25]


def test_observe_many_fills_the_same_buckets_sum_and_count_as_observe() -> None:
    registry = CollectorRegistry()
    hist = Histogram("h", "h", ["hop"], buckets=(0.0005, 0.001, 0.05, 0.25, 30.0),
                     registry=registry)
    for v in VALUES:
        hist.labels("one").observe(v)
    observe_many(hist.labels("many"), VALUES)
    samples: dict[str, dict[tuple, float]] = {"one": {}, "many": {}}
    for metric in registry.collect():
        for s in metric.samples:
            if s.name.endswith("_created"):
                continue
            samples[s.labels["hop"]][(s.name, s.labels.get("le"))] = s.value
    assert samples["one"] == samples["many"]
    assert samples["many"][("h_count", None)] == len(VALUES)
    assert samples["many"][("h_bucket", "0.001")] == 4  # a value on a bound counts in it
