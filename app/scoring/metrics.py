"""Scorer metrics: rows and calls per execution provider, and the CPU/CUDA crossover in use.

A scorer reports through the `ScorerMetrics` Protocol, so scoring logic stays free of a metrics
library: the worker's scorer gets `PrometheusScorerMetrics` (exported on the worker's /metrics
from prometheus_client's default registry), tests and benchmarks a `ProviderTally`. Importing
this module does not need prometheus_client (benchmarks run on bare GPU machines).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol


class ScorerMetrics(Protocol):
    """Where a scorer reports what it did."""

    def scored(self, provider: str, rows: int) -> None:
        """One call of `score()` ran `rows` rows on `provider`."""

    def crossover(self, model: str, min_batch: float) -> None:
        """Model `model` scores batches of at least `min_batch` rows on CUDA (inf: never)."""


class ProviderTally:
    """In-process counts of calls and rows per provider (tests, benchmarks, `score` summaries)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.rows: Counter[str] = Counter()
        self.min_batch: dict[str, float] = {}

    def scored(self, provider: str, rows: int) -> None:
        self.calls[provider] += 1
        self.rows[provider] += rows

    def crossover(self, model: str, min_batch: float) -> None:
        self.min_batch[model] = min_batch

    def share(self, provider: str) -> float:
        """Fraction of all rows scored on `provider` (0.0 before any row)."""
        total = sum(self.rows.values())
        return self.rows[provider] / total if total else 0.0


_PROMETHEUS: dict[str, Any] = {}


def _prometheus() -> dict[str, Any]:
    """The collectors, registered once per process on first use."""
    if not _PROMETHEUS:
        from prometheus_client import Counter as PromCounter
        from prometheus_client import Gauge

        _PROMETHEUS["calls"] = PromCounter(
            "fraudstream_scorer_calls_total", "Calls of the scorer, by execution provider.",
            ["provider"])
        _PROMETHEUS["rows"] = PromCounter(
            "fraudstream_scorer_rows_total", "Rows (transactions) scored, by execution provider.",
            ["provider"])
        _PROMETHEUS["min_batch"] = Gauge(
            "fraudstream_scorer_gpu_min_batch",
            "Smallest batch scored on CUDA (measured at start-up or FRAUDSTREAM_GPU_MIN_BATCH).",
            ["model_version"])
    return _PROMETHEUS


class PrometheusScorerMetrics:
    """ScorerMetrics on prometheus_client's default registry (the worker's /metrics page)."""

    def __init__(self) -> None:
        collectors = _prometheus()
        self._calls = collectors["calls"]
        self._rows = collectors["rows"]
        self._min_batch = collectors["min_batch"]
        self._children: dict[str, tuple[Any, Any]] = {}  # per provider: labels() once

    def scored(self, provider: str, rows: int) -> None:
        children = self._children.get(provider)
        if children is None:
            children = self._children[provider] = (self._calls.labels(provider),
                                                   self._rows.labels(provider))
        children[0].inc()
        children[1].inc(rows)

    def crossover(self, model: str, min_batch: float) -> None:
        self._min_batch.labels(model).set(min_batch)


def default_metrics() -> ScorerMetrics | None:
    """Prometheus metrics where prometheus_client is installed, else none."""
    try:
        return PrometheusScorerMetrics()
    except ImportError:
        return None
