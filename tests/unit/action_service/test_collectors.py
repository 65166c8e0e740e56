"""Lock-free metric families export exactly what prometheus_client's own metrics would."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from app.action_service.collectors import CounterFamily, HistogramFamily

BUCKETS = (0.001, 0.005, 0.01, 1.0)


def _text(registry: CollectorRegistry) -> str:
    return re.sub(r"_created(\{[^}]*\})? \S+", r"_created\1 T", generate_latest(registry).decode())


def test_same_exposition_as_the_library():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fam_c = CounterFamily("x_requests_total", "Requests.", ["route", "status"], registry=ours)
    lib_c = Counter("x_requests_total", "Requests.", ["route", "status"], registry=theirs)
    fam_h = HistogramFamily("x_seconds", "Latency.", ["route"], buckets=BUCKETS, registry=ours)
    lib_h = Histogram("x_seconds", "Latency.", ["route"], buckets=BUCKETS, registry=theirs)
    fam_g = CounterFamily("x_gone_total", "Gone.", registry=ours)
    Counter("x_gone_total", "Gone.", registry=theirs).inc(2)
    fam_g.inc(2)
    for value in (0.0005, 0.001, 0.0011, 0.005, 0.5, 1.0, 3.0):  # bounds are inclusive
        fam_h.labels("/a").observe(value)
        lib_h.labels("/a").observe(value)
    fam_c.labels("/a", "201").inc()
    fam_c.labels("/a", "201").inc(3)
    lib_c.labels("/a", "201").inc(4)
    assert _text(ours) == _text(theirs)
    assert 'x_seconds_bucket{le="0.001",route="/a"} 2.0' in _text(ours)


def test_guards():
    registry = CollectorRegistry()
    family = CounterFamily("y_total", "Y.", ["kind"], registry=registry)
    with pytest.raises(ValueError):
        family.labels("a", "b")
    with pytest.raises(ValueError):
        family.labels("a").inc(-1)
    with pytest.raises(ValueError):
        HistogramFamily("z", "Z.", buckets=(1.0, 0.5), registry=registry)
