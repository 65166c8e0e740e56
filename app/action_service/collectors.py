"""Counters and histograms as plain numbers, turned into Prometheus samples only at scrape time.

`prometheus_client`'s Counter and Histogram take a lock on every `inc`/`observe` (a histogram one
per bucket walk and one for its sum), which shows on the action service's per-request path. The
service runs on one event loop, so its counts need no lock: a child here is a list of numbers
that a request bumps in place, and `collect` (called by the registry when /metrics is scraped,
on the same loop) folds them into the same families, names, labels and samples
(`_total`/`_created`, `_bucket`/`_count`/`_sum`/`_created`) the library's own metrics export.
Not thread-safe: update and scrape from one thread (the event loop's).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class CounterChild:
    """One label combination of a `CounterFamily`."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount` (>= 0)."""
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount


class HistogramChild:
    """One label combination of a `HistogramFamily`: a count per bucket and the sum."""

    __slots__ = ("_bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        """Count `value` in the first bucket whose upper bound is >= it."""
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.total += value


class _Family(Collector):
    """Children by label values; registered with `registry` under `name`."""

    _type = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], CounterChild | HistogramChild] = {}
        registry.register(self)

    def _child(self, labels: tuple[str, ...]) -> CounterChild | HistogramChild:
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {labels}")
        found = self._children.get(labels)
        if found is None:
            found = self._children[labels] = self._new_child()
        return found

    def _new_child(self) -> CounterChild | HistogramChild:
        raise NotImplementedError

    def describe(self) -> Iterator[Metric]:
        yield Metric(self.name, self.documentation, self._type)

    def _metric(self) -> Metric:
        return Metric(self.name, self.documentation, self._type)


class CounterFamily(_Family):
    """A counter with labels (`labels(...)`), or without (`inc()` on the family itself)."""

    _type = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 registry: CollectorRegistry) -> None:
        # the family is named without `_total`, its samples with it (as the library does)
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry)
        if not self.labelnames:
            self._child(())  # exported as 0 before the first increment, as the library does

    def _new_child(self) -> CounterChild:
        return CounterChild()

    def labels(self, *values: str) -> CounterChild:
        """The child of these label values (created at 0 on first use)."""
        return self._child(tuple(values))  # type: ignore[return-value]

    def inc(self, amount: float = 1.0) -> None:
        """Increment the counter of a family without labels."""
        self.labels().inc(amount)

    def collect(self) -> Iterator[Metric]:
        metric = self._metric()
        for values, child in list(self._children.items()):
            labels = dict(zip(self.labelnames, values, strict=True))
            metric.add_sample(self.name + "_total", labels, child.value)
            metric.add_sample(self.name + "_created", labels, child.created)
        yield metric


class HistogramFamily(_Family):
    """A histogram with fixed upper bounds (+Inf added), with or without labels."""

    _type = "histogram"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Sequence[float], registry: CollectorRegistry) -> None:
        bounds = tuple(float(b) for b in buckets)
        if list(bounds) != sorted(set(bounds)) or bounds[-1] == float("inf"):
            raise ValueError("buckets must be strictly increasing and finite (+Inf is added)")
        self._bounds = bounds
        self._le = [floatToGoString(b) for b in bounds] + ["+Inf"]
        super().__init__(name, documentation, labelnames, registry)
        if not self.labelnames:
            self._child(())

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self._bounds)

    def labels(self, *values: str) -> HistogramChild:
        """The child of these label values (created empty on first use)."""
        return self._child(tuple(values))  # type: ignore[return-value]

    def observe(self, value: float) -> None:
        """Observe `value` on a family without labels."""
        self.labels().observe(value)

    def collect(self) -> Iterator[Metric]:
        metric = self._metric()
        for values, child in list(self._children.items()):
            assert isinstance(child, HistogramChild)
            labels = dict(zip(self.labelnames, values, strict=True))
            cumulative = 0
            for le, count in zip(self._le, child.counts, strict=True):
                cumulative += count
                metric.add_sample(self.name + "_bucket", {**labels, "le": le}, cumulative)
            metric.add_sample(self.name + "_count", labels, cumulative)
            metric.add_sample(self.name + "_sum", labels, child.total)
            metric.add_sample(self.name + "_created", labels, child.created)
        yield metric
