"""Prometheus metrics of one action-service app, in its own registry (served at /metrics)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from app.action_service.collectors import CounterFamily, HistogramFamily

__all__ = ["CONTENT_TYPE_LATEST", "ServiceMetrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServiceMetrics:
    """Counters and histograms; one registry per app so tests can build many.

    They are lock-free families (collectors.py) folded into samples at scrape time, with the
    names, labels and samples of prometheus_client's own; label children are looked up once
    and cached (`child`), so a request pays a dict lookup and an addition per metric.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = CounterFamily(
            "action_service_requests_total",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = HistogramFamily(
            "action_service_request_duration_seconds",
            "HTTP request latency by route template and method.",
            ["route", "method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.effects = CounterFamily(
            "action_service_effects_applied_total",
            "Keys applied (answered 201) by action type and outcome.",
            ["type", "outcome"],
            registry=r,
        )
        self.replays = CounterFamily(
            "action_service_replays_absorbed_total",
            "Known keys answered 200 from the stored record (no second effect).",
            ["type"],
            registry=r,
        )
        self.gone = CounterFamily(
            "action_service_gone_total",
            "Actions refused with 410: too old to be deduplicated safely.",
            registry=r,
        )
        self.conflicts = CounterFamily(
            "action_service_key_conflicts_total",
            "Idempotency-key conflicts: reused with another payload (422) or in flight (409).",
            ["kind"],
            registry=r,
        )
        self.redis_unavailable = CounterFamily(
            "action_service_redis_unavailable_total",
            "Requests answered 503 because Redis could not be reached.",
            registry=r,
        )

        self.apply_batch_size = HistogramFamily(
            "action_service_apply_batch_size",
            "Actions per apply script call (the apply batcher's batch size).",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.redis_round_trip = HistogramFamily(
            "action_service_redis_round_trip_seconds",
            "Time of one apply script call: send, run in Redis, reply read.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.reviews_open = Gauge(
            "action_service_reviews_open",
            "Open reviews in the review queue (read from Redis at scrape time).",
            registry=r,
        )
        self.review_oldest_age = Gauge(
            "action_service_review_oldest_age_seconds",
            "Age of the oldest open review at scrape time (0: the queue is empty).",
            registry=r,
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: CounterFamily | HistogramFamily, *labels: str) -> Any:
        """`metric.labels(*labels)`, cached."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def status_counters(self, route: str, method: str) -> Callable[[int], Any]:
        """The requests counter of `route` and `method` by status, children cached."""
        cache: dict[int, Any] = {}

        def counter(status: int) -> Any:
            found = cache.get(status)
            if found is None:
                found = cache[status] = self.requests.labels(route, method, str(status))
            return found

        return counter

    def batch_done(self, size: int, seconds: float) -> None:
        """One apply script call of `size` actions took `seconds` (the batcher's observer)."""
        self.apply_batch_size.observe(size)
        self.redis_round_trip.observe(seconds)

    def review_queue(self, depth: int, oldest_ms: int | None, now_ms: int) -> None:
        """The review queue as read just before a scrape."""
        self.reviews_open.set(depth)
        self.review_oldest_age.set(0 if oldest_ms is None else max(0, now_ms - oldest_ms) / 1e3)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
