"""docs/benchmarks.md and its plots, from pipeline_bench's figures."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

#: The heading of state_bench's section of docs/benchmarks.md (written by hand from its output).
STATE_SECTION = "## Card state at scale"


def _save(fig: Any, path: Path) -> None:
    """Lay a figure out, write it (110 dpi) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(docs: Path, raws: list[Any], workers: list[Any], ratios: list[float],
                 latencies: dict[str, list[float]], hops: dict[str, list[float]], *,
                 load: float, rate: float, txns: int, command: str) -> None:
    """Write docs/benchmarks.md and docs/benchmarks/*.png (matplotlib, headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = docs / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(1, len(raws) + 1)
    ax.bar([x - 0.2 for x in xs], [r.rate for r in raws], 0.4, label="raw aiokafka loop")
    ax.bar([x + 0.2 for x in xs], [w.rate for w in workers], 0.4, label="fraudstream worker")
    ax.set_xlabel("pair")
    ax.set_ylabel("events/s (broker append time)")
    ax.set_xticks(list(xs))
    ax.legend()
    ax.set_title(f"Throughput, {txns:,} transactions per run")
    _save(fig, out / "throughput.png")

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, values in latencies.items():
        ordered = sorted(values)
        if ordered:
            ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, broker append → broker append)")
    ax.set_ylabel("share of records")
    ax.axvline(50, color="grey", linestyle=":", label="50 ms budget")
    ax.legend()
    ax.set_title(f"Latency CDF at {load:.0%} load ({rate:,.0f} events/s)")
    _save(fig, out / "latency_cdf.png")

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = sorted(hops)
    ax.barh([n + " p50" for n in names], [hops[n][0] * 1000 for n in names])
    ax.barh([n + " p99" for n in names], [hops[n][1] * 1000 for n in names])
    ax.set_xscale("log")
    ax.set_xlabel("ms (upper bound of the histogram bucket)")
    ax.set_title("Per-hop latency (worker /metrics)")
    _save(fig, out / "hops.png")

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    rows = "\n".join(
        f"| {i} | {r.rate:,.0f} | {w.rate:,.0f} | {w.rate / r.rate:.3f} | "
        f"{r.cpu_us_per_event:.1f} | {w.cpu_us_per_event:.1f} | {r.broker_us_per_event:.1f} | "
        f"{w.broker_us_per_event:.1f} |"
        for i, (r, w) in enumerate(zip(raws, workers, strict=True), 1))
    lat = "\n".join(f"| {name} | {pct(v, 0.5):.1f} | {pct(v, 0.99):.1f} | {max(v):.1f} | "
                    f"{len(v):,} |" for name, v in latencies.items() if v)
    hop_rows = "\n".join(f"| {n} | ≤ {hops[n][0] * 1000:.1f} | ≤ {hops[n][1] * 1000:.1f} |"
                         for n in names)
    page = docs / "benchmarks.md"
    # sections other benchmarks own (state_bench's "Card state at scale") are kept
    kept = ""
    if page.exists():
        text = page.read_text()
        at = text.find(STATE_SECTION)
        kept = "\n" + text[at:] if at >= 0 else ""
    page.write_text(f"""# Benchmarks: one worker against the raw Kafka client

Live load (steady offered rates, the SLO rate within 50 ms, overload and recovery): see
[benchmarks/live-load.md](benchmarks/live-load.md). at_least_once against exactly_once (backlog
rate and live latency in the same run, when to choose which): exactly_once's backlog rate is
1.02× at_least_once's, its p99 as a read_committed reader sees it 1.1–1.3 s against 32–47 ms
(26–40×) at the same offered rates (2026-11-26); see
[benchmarks/processing.md](benchmarks/processing.md). This page is the backlog run of
`benchmarks/pipeline_bench.py`.

Written by `{command}` (see the script's docstring for the method). One 2-core machine runs
the broker, the worker and the raw loop; every rate is taken from broker append timestamps.

## Throughput ({txns:,} transactions per run, raw loop and worker alternating)

Median ratio worker / raw: **{statistics.median(ratios):.3f}** (min {ratios[0]:.3f}, max
{ratios[-1]:.3f}).

| pair | raw ev/s | worker ev/s | ratio | raw µs CPU/ev | worker µs CPU/ev | broker µs CPU/ev (raw) | broker µs CPU/ev (worker) |
|---|---|---|---|---|---|---|---|
{rows}

![throughput per pair](benchmarks/throughput.png)

## Latency at {load:.0%} load ({rate:,.0f} events/s)

Measured after 2 s of warm-up input, replayed and handled first (the per-hop histograms include it).

| path | p50 ms | p99 ms | max ms | records |
|---|---|---|---|---|
{lat}

![latency CDF](benchmarks/latency_cdf.png)

Per hop, from the worker's `fraudstream_hop_seconds` histograms (bucket upper bounds):

| hop | p50 ms | p99 ms |
|---|---|---|
{hop_rows}

![per-hop latency](benchmarks/hops.png)
""" + kept)


def write_live_load(docs: Path, raw: float, steps: list[Any], slo: float, *,
                    overload: list[str], backlog: float, command: str, when: str,
                    raw_live: list[Any] = (), raw_slo: float | None = None) -> Path:
    """Write docs/benchmarks/live-load.md and its two plots from benchmarks/live_load.py."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = docs / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    steps = sorted(steps, key=lambda s: s.offered)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([s.offered / raw for s in steps], [s.steady_p99 for s in steps], "o-",
            label="steady p99 (after the first 4 s)")
    ax.plot([s.offered / raw for s in steps], [s.cold_p99 for s in steps], "s--",
            label="cold p99 (first 4 s)")
    ax.axhline(50, color="red", linewidth=1, label="50 ms budget")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate / raw loop's backlog rate")
    ax.set_ylabel("event → served row, ms")
    ax.legend()
    ax.set_title("p99 against offered load, one worker")
    _save(fig, out / "live_p99.png")

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([s.mean_batch for s in steps], [s.cpu_us for s in steps], "o")
    for s in steps:
        ax.annotate(f"{s.offered:,.0f}/s", (s.mean_batch, s.cpu_us), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("mean batch size")
    ax.set_ylabel("worker CPU µs per event")
    ax.set_title("CPU per event against batch size")
    _save(fig, out / "live_cpu.png")

    rows = "\n".join(
        f"| {s.offered:,.0f} | {s.offered / raw:.2f} | {s.steady_p50:.0f} | {s.steady_p99:.0f} | "
        f"{s.cold_p99:.0f} | {s.within_budget:.2%} | {s.cpu_us:.0f} | {s.mean_batch:.0f} | "
        f"{s.stolen:.2f} |"
        for s in steps)
    raw_rows = "\n".join(
        f"| {s.offered:,.0f} | {s.offered / raw:.2f} | {s.steady_p50:.0f} | {s.steady_p99:.0f} | "
        f"{s.cold_p99:.0f} | {s.within_budget:.2%} | {s.cpu_us:.0f} |"
        for s in sorted(raw_live, key=lambda s: s.offered))
    raw_part = "Not run (`--no-raw-live`)." if not raw_live else f"""The raw loop itself, fed live \
at the same rates (its own process, in its group before the first event; latency from the \
source position each copy carries). Its SLO rate: **{raw_slo or 0:,.0f} ev/s = \
{(raw_slo or 0) / raw:.3f}× its backlog rate**; the worker's is \
**{slo / raw_slo if raw_slo else float("nan"):.2f}×** the raw loop's live SLO rate.

| offered ev/s | × raw | p50 ms | p99 ms | cold p99 ms | within 50 ms | CPU µs/ev |
|---|---|---|---|---|---|---|
{raw_rows}"""
    page = out / "live-load.md"
    page.write_text(f"""# Live load: one worker fed at a steady rate

Measured {when} on this project's 2-core machine with `{command}`.

The raw aiokafka consume→produce loop's backlog rate: **{raw:,.0f} ev/s**; the worker on the same
backlog: **{backlog:.3f}×** that (medians, same run). Each step: fresh topics,
a fresh worker that has joined its group before the input starts, the project's paced replay (a
record batch per partition every 5 ms). Latency is broker append of a transaction → broker append
of its served row. "cold" is the first 4 s of input, "steady" the rest. "host stole" is the CPU
the hypervisor gave elsewhere while the step's input ran (/proc/stat steal, in cores): a step
above `--retry-stolen` was run again and the attempt with the least counts (all are in the
bench's output).

**SLO rate (steady p99 ≤ 50 ms, every lower step too): {slo:,.0f} ev/s = {slo / raw:.3f}× the raw
loop.**

| offered ev/s | × raw | p50 ms | p99 ms | cold p99 ms | within 50 ms | CPU µs/ev | batch | host stole (cores) |
|---|---|---|---|---|---|---|---|---|
{rows}

![p99 against offered load](live_p99.png)

![CPU per event against batch size](live_cpu.png)

## The raw loop fed live (the ceiling of the client)

{raw_part}

## Overload and recovery

{chr(10).join(overload) if overload else "Not run (`--no-overload`)."}
""")
    return page
