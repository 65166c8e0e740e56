"""watch from captured metrics: parsing, rates, quantiles, resets and the rendered screen."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from app.action_service.metrics import ServiceMetrics
from app.watch.frame import HOPS, PartitionOffsets, Reading, build_frame
from app.watch.render import render
from app.watch.samples import bucket_delta, buckets, counter_rate, parse, quantile

WORKER_TEXT = (Path(__file__).parent / "worker_metrics.txt").read_text()


def _service_text(effects: int, replays: int) -> str:
    m = ServiceMetrics()
    m.effects.labels("freeze_card", "applied").inc(effects)
    m.replays.labels("freeze_card").inc(replays)
    return m.exposition().decode()


def _reading(at: float, texts: list[str], service: str | None, offsets: dict[int, tuple]) -> Reading:
    return Reading(at_s=at, workers=parse(texts), workers_up=len(texts), workers_total=2,
                   service=parse([service] if service else []), service_up=service is not None,
                   offsets={p: PartitionOffsets(*o) for p, o in offsets.items()})


def test_the_captured_page_has_what_watch_reads() -> None:
    s = parse([WORKER_TEXT])
    assert s.total("fraudstream_scored_total") == 600
    assert s.total("fraudstream_dlq_messages_total") == 30
    for hop in HOPS:
        assert buckets(s, "fraudstream_hop_seconds", hop=hop), hop
    assert s.by_label("fraudstream_consumer_lag_seconds", "partition")


def test_two_workers_add_up() -> None:
    s = parse([WORKER_TEXT, WORKER_TEXT])
    assert s.total("fraudstream_scored_total") == 1200


def test_quantile_is_prometheus_interpolation() -> None:
    cum = [(0.1, 50.0), (0.2, 100.0), (float("inf"), 100.0)]
    assert quantile(0.5, cum) == pytest.approx(0.1)
    assert quantile(0.75, cum) == pytest.approx(0.15)
    assert quantile(0.99, [(0.1, 0.0), (float("inf"), 10.0)]) == 0.1  # beyond the last bound
    assert quantile(0.5, [(0.1, 0.0), (float("inf"), 0.0)]) is None


def test_a_counter_reset_counts_from_zero() -> None:
    assert counter_rate(30.0, 10.0, 2.0) == 10.0
    assert counter_rate(4.0, 100.0, 2.0) == 2.0  # the worker restarted
    assert counter_rate(4.0, None, 2.0) is None
    now = [(0.1, 3.0), (float("inf"), 4.0)]
    assert bucket_delta(now, [(0.1, 10.0), (float("inf"), 12.0)]) == now


def test_frame_from_two_readings() -> None:
    before = _reading(0.0, [WORKER_TEXT.replace("fraudstream_scored_total 600.0",
                                                "fraudstream_scored_total 400.0")],
                      _service_text(10, 1), {0: (100, 40), 1: (50, None)})
    now = _reading(2.0, [WORKER_TEXT], _service_text(21, 3), {0: (300, 250), 1: (70, None)})
    frame = build_frame(now, before, group="g")
    assert frame.in_per_s == pytest.approx((370 - 150) / 2)
    assert frame.out_per_s == pytest.approx(200 / 2)  # scored went 400 -> 600
    assert [(p.partition, p.lag_messages) for p in frame.partitions] == [(0, 50), (1, 70)]
    assert frame.lag_messages == 120
    assert frame.effects == 21 and frame.replays_absorbed == 3
    assert frame.models == [("lgbm-7a5e0e98b6f9", "CPUExecutionProvider")]
    assert frame.dlq == 30 and frame.scored == 600
    assert not frame.hops_recent  # histograms did not move between the readings
    assert {h.hop for h in frame.hops} == set(HOPS)
    assert frame.problems == ["1 of 2 worker metrics pages did not answer"]


def test_screen_shows_every_part() -> None:
    before = _reading(0.0, [], None, {})
    now = _reading(1.0, [WORKER_TEXT], None, {p: (10, 10) for p in range(20)})
    console = Console(width=160, record=True, color_system=None)
    console.print(render(build_frame(now, before, group="g"), title="t"))
    text = console.export_text()
    assert "lgbm-7a5e0e98b6f9 on CPUExecutionProvider" in text
    assert "4 more partitions not shown" in text  # 20 partitions, 16 rows
    for hop in HOPS:
        assert hop in text
    assert "scored 600 · dead-lettered 30" in text
    assert "action service not answering" in text
    assert "the action service's /metrics did not answer" in text


def _served(at: float, within: int, total: int) -> Reading:
    """A reading whose event → served histogram holds `within` events ≤ 50 ms of `total`."""
    lines = [f'fraudstream_hop_seconds_bucket{{hop="event_to_served",le="{le}"}} {n}.0'
             for le, n in (("0.025", within // 2), ("0.05", within), ("0.1", total),
                           ("+Inf", total))]
    lines.append(f'fraudstream_hop_seconds_count{{hop="event_to_served"}} {total}.0')
    return _reading(at, ["\n".join(lines) + "\n"], None, {})


def test_the_latency_budget_is_shown_over_the_last_minute_of_readings() -> None:
    early, minute_ago = _served(0.0, 90, 1000), _served(10.0, 100, 1000)
    now = _served(70.0, 8_200, 10_000)
    frame = build_frame(now, _served(69.0, 8_000, 9_800), group="g", minute_ago=minute_ago,
                        budget_s=0.05)
    b = frame.budget
    assert b is not None and (b.events, b.window_s) == (9_000, 60.0)
    assert b.within == pytest.approx(0.9)  # 8,100 of the 9,000 events of the last minute
    assert b.p99_s is not None and 0.05 < b.p99_s <= 0.1 and b.met is False
    since_start = build_frame(early, None, group="g").budget
    assert since_start is not None and since_start.within == pytest.approx(0.09)
    assert since_start.window_s == 0.0
    # a budget between histogram bounds counts at the bound below it: never overstated
    assert build_frame(now, None, group="g", budget_s=0.07).budget.within == pytest.approx(0.82)
    console = Console(width=160, record=True, color_system=None)
    console.print(render(frame, title="t"))
    text = console.export_text()
    assert "of 50 ms, 90.00% of 9,000 events within (last 60 s)" in text


def test_the_review_queue_and_rule_hits_are_shown() -> None:
    m = ServiceMetrics()
    m.review_queue(3, 1_000_000, 1_090_500)
    rules = ('fraudstream_rule_hits_total{mode="active",rule="big",version="2"} 7.0\n'
             'fraudstream_rule_hits_total{mode="active",rule="big",version="1"} 2.0\n')
    frame = build_frame(_reading(10.0, [WORKER_TEXT + rules], m.exposition().decode(), {}),
                        None, group="g")
    assert (frame.reviews_open, frame.review_oldest_s) == (3, 90.5)
    assert frame.rule_hits == {"big": 9.0}
    console = Console(width=160, record=True)
    console.print(render(frame, title="t"))
    assert "reviews open 3, oldest 90 s · rule hits: big 9" in console.export_text()


def test_at_80_columns_every_hop_name_is_whole_and_no_line_is_cut() -> None:
    """`watch --once` into a pipe renders at 80 columns: the hop table goes below the partition
    table rather than squeezing its names to `append…`; wider, they sit side by side."""
    before = _reading(0.0, [WORKER_TEXT], _service_text(1, 0), {p: (10, 10) for p in range(8)})
    now = _reading(1.0, [WORKER_TEXT], _service_text(2, 0), {p: (12, 10) for p in range(8)})
    frame = build_frame(now, before, group="g")
    narrow = Console(width=80, record=True, color_system=None)
    narrow.print(render(frame, title="t"))
    lines = narrow.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "…" not in "\n".join(lines)
    for hop in HOPS:
        assert any(hop in line and " ms " in f"{line} " for line in lines), hop
    wide = Console(width=160, record=True, color_system=None)
    wide.print(render(frame, title="t"))
    assert any("append_to_engine" in line and "│ 0 " in line
               for line in wide.export_text().splitlines())
