"""Prometheus text exposition parsed into samples, and the sums and quantiles watch needs."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Samples:
    """Every sample of one or more /metrics pages: name -> {sorted labels: value}."""

    values: Mapping[str, Mapping[Labels, float]] = field(default_factory=dict)

    def get(self, name: str) -> Mapping[Labels, float]:
        return self.values.get(name, {})

    def total(self, name: str, **match: str) -> float:
        """Sum of `name` over the samples whose labels include `match`."""
        return sum(v for labels, v in self.get(name).items() if _has(labels, match))

    def by_label(self, name: str, label: str, **match: str) -> dict[str, float]:
        """Sum of `name` per value of `label`."""
        out: dict[str, float] = defaultdict(float)
        for labels, v in self.get(name).items():
            if _has(labels, match):
                out[dict(labels).get(label, "")] += v
        return dict(out)

    def has(self, name: str) -> bool:
        return bool(self.get(name))


def _has(labels: Labels, match: Mapping[str, str]) -> bool:
    d = dict(labels)
    return all(d.get(k) == v for k, v in match.items())


def parse(texts: Iterable[str]) -> Samples:
    """Parse /metrics pages and add them up sample by sample (several workers = one view)."""
    from prometheus_client.parser import text_string_to_metric_families

    merged: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                merged[sample.name][labels] += sample.value
    return Samples({name: dict(values) for name, values in merged.items()})


def gauge_max(samples: Samples, name: str, label: str) -> dict[str, float]:
    """Largest value of a gauge per `label` value (lag of a partition: its owner's reading)."""
    # parse() sums workers; a partition's lag gauge is set by its owner and 0 elsewhere, so the
    # sum is the owner's value. Kept as its own function so that assumption is stated once.
    return samples.by_label(name, label)


def counter_rate(now: float, before: float | None, seconds: float) -> float | None:
    """Per-second increase of a counter; a counter that went down (a restart) counts from 0."""
    if before is None or seconds <= 0:
        return None
    delta = now - before if now >= before else now
    return delta / seconds


def buckets(samples: Samples, name: str, **match: str) -> list[tuple[float, float]]:
    """Cumulative (upper bound, count) pairs of a histogram, summed over everything but `le`."""
    acc: dict[float, float] = defaultdict(float)
    for labels, v in samples.get(f"{name}_bucket").items():
        d = dict(labels)
        if all(d.get(k) == val for k, val in match.items()):
            acc[float(d["le"])] += v
    return sorted(acc.items())


def bucket_delta(now: list[tuple[float, float]],
                 before: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The observations between two readings of the same histogram (now if it was reset)."""
    prev = dict(before)
    delta = [(le, c - prev.get(le, 0.0)) for le, c in now]
    if any(c < 0 for _, c in delta):
        return now
    return delta


def quantile(q: float, cumulative: list[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile: linear inside the bucket that holds rank q·count."""
    if not cumulative:
        return None
    total = cumulative[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank:
            if math.isinf(le):
                return lower_bound  # beyond the last finite bucket: its bound is all we know
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return lower_bound
