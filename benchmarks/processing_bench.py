"""at_least_once against exactly_once, same run: backlog throughput and the live-load SLO rate.

    .venv/bin/python -m benchmarks.processing_bench                  # 2 backlog pairs, 4 steps
    .venv/bin/python -m benchmarks.processing_bench --txns 50000 --pairs 1 --steps 0.1 --seconds 10

Backlog: one worker (no dispatch) per mode on fresh topics pre-filled with the same log, the
modes alternating (first one, then the other, then the other first); a side's rate is its
served rows (read as a downstream consumer reads them: read_committed in exactly_once) over the
span between the first and the last broker append of features.served (LogAppendTime).

Live: for each offered rate (a share of the median at_least_once backlog rate) and each mode,
fresh topics and a fresh worker fed for `--seconds` by the paced replay. A downstream consumer
tails features.served at the mode's isolation level while it runs: a row's latency is the
broker append of its transaction → the moment that consumer was handed the row. That is what
exactly_once costs a reader (rows appear at their transaction's commit, not at their append),
so both modes are measured the same way. The first COLD_S seconds of input are left out. The SLO
rate of a mode is its highest step with p99 ≤ 50 ms and every lower step within it too.
`--modes` may add `exactly_once@N`: exactly_once with FRAUDSTREAM_STATE_INTERVAL_MS=N.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import click
import orjson

from app.harness.pipeline import lines_of, make_log, replay
from app.harness.procs import spawn_worker, wait_until
from app.kafka import topics
from app.kafka.inspect import read_topic
from app.kafka.topics import drop_topics
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from benchmarks.pipeline_bench import (
    bench_stack,
    cpu_s,
    fresh,
    handled,
    hop_quantiles,
    pct,
    scrape,
    slo_rate,
    start_worker,
)

BUDGET_MS = 50.0
COLD_S = 4.0


def mode_settings(base: Settings, mode: str) -> Settings:
    """`at_least_once`, `exactly_once` or `exactly_once@N` (state interval N ms)."""
    processing, _, interval = mode.partition("@")
    settings = base.replace(processing=processing)
    return settings.replace(state_interval_ms=int(interval)) if interval else settings


@dataclass
class Backlog:
    rate: float
    cpu_us: float


def measure_backlog(settings: Settings, lines: list[bytes], tmp: Path) -> Backlog:
    replay(settings, lines)
    worker = spawn_worker(settings, tmp, dispatch=False)
    try:
        done = wait_until(lambda: handled(worker.port), timeout_s=120, interval_s=0.05,
                          what="the first handled transaction")
        w0 = cpu_s(worker.pid)
        wait_until(lambda: handled(worker.port) >= len(lines), timeout_s=900, interval_s=0.5,
                   what="every transaction handled")
        cpu = cpu_s(worker.pid) - w0
        # exactly_once: the last transactions commit after their rows are handled
        name = settings.topic(topics.FEATURES_SERVED)
        rows = wait_until(lambda: _all_committed(settings, name, len(lines)), timeout_s=60,
                          interval_s=0.5, what="every served row committed")
    finally:
        worker.stop()
    stamps = [r.timestamp_ms for r in rows]
    span = (max(stamps) - min(stamps)) / 1000
    return Backlog(len(rows) / max(1e-3, span), cpu / max(1.0, len(lines) - done) * 1e6)


def _all_committed(settings: Settings, name: str, total: int) -> list | None:
    rows = asyncio.run(read_topic(settings, name, timeout_s=120))
    # every line is served, dead-lettered or late: served rows are most of them
    return rows if len(rows) >= 0.9 * total else None


class Tail(threading.Thread):
    """A downstream reader of features.served at the settings' isolation level: when each row
    (by its source partition and offset) was handed to it, wall-clock ms."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.seen: dict[tuple[int, int], int] = {}
        self.ready = threading.Event()
        self.stop_at: float | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc
            self.ready.set()

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        s = self.settings
        consumer = AIOKafkaConsumer(**kafka_client_kwargs(s), isolation_level=s.isolation_level,
                                    enable_auto_commit=False, fetch_max_wait_ms=5)
        await consumer.start()
        try:
            name = s.topic(topics.FEATURES_SERVED)
            tps = [TopicPartition(name, p) for p in range(s.topic_partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            self.ready.set()
            while self.stop_at is None or time.monotonic() < self.stop_at:
                batch = await consumer.getmany(timeout_ms=50)
                now = time.time_ns() // 1_000_000
                for msgs in batch.values():
                    for m in msgs:
                        row = orjson.loads(m.value)
                        self.seen.setdefault((row["partition"], row["offset"]), now)
        finally:
            await consumer.stop()


@dataclass
class Step:
    mode: str
    offered: float
    rows: int
    p50: float
    p99: float
    within: float
    cpu_us: float
    #: the worker's own view, p99 bucket bounds (ms): event → outputs acknowledged by the
    #: broker, and event → served (exactly_once: its transaction committed)
    hops: dict[str, float]

    @property
    def ok(self) -> bool:
        return self.p99 <= BUDGET_MS


def run_step(settings: Settings, mode: str, lines: list[bytes], rate: float, seconds: float,
             tmp: Path) -> Step:
    worker = start_worker(settings, tmp)
    tail = Tail(settings)
    try:
        tail.start()
        tail.ready.wait(30)
        n = int(rate * seconds)
        c0 = cpu_s(worker.pid)
        replay(settings, lines[:n], rate=rate)
        wait_until(lambda: handled(worker.port) >= n, timeout_s=120 + seconds, interval_s=0.25,
                   what="every transaction handled")
        cpu = cpu_s(worker.pid) - c0
        hops = {h: q[1] * 1000 for h, q in hop_quantiles(scrape(worker.port)).items()}
        served = asyncio.run(read_topic(settings, settings.topic(topics.FEATURES_SERVED)))
        wait_until(lambda: len(tail.seen) >= len(served), timeout_s=60, interval_s=0.2,
                   what="the tailing reader to see every row")
    finally:
        tail.stop_at = time.monotonic()
        tail.join(30)
        worker.stop()
    if tail.error is not None:
        raise tail.error
    appended = {(r.partition, r.offset): r.timestamp_ms
                for r in asyncio.run(read_topic(settings, settings.topic(topics.TRANSACTIONS)))}
    first = min(appended.values())
    steady = [seen - appended[pos] for pos, seen in tail.seen.items()
              if appended[pos] >= first + COLD_S * 1000]
    return Step(mode, rate, len(steady), pct(steady, 0.5), pct(steady, 0.99),
                sum(1 for v in steady if v <= BUDGET_MS) / max(1, len(steady)),
                cpu / max(1, n) * 1e6, hops)


@click.command()
@click.option("--modes", default="at_least_once,exactly_once", show_default=True)
@click.option("--txns", default=100_000, show_default=True, help="Backlog log size.")
@click.option("--pairs", default=2, show_default=True, help="Backlog runs per mode.")
@click.option("--steps", default="0.05,0.10,0.20,0.30", show_default=True,
              help="Offered rates, shares of the median at_least_once backlog rate.")
@click.option("--seconds", default=15.0, show_default=True, help="Input per live step.")
def main(modes: str, txns: int, pairs: int, steps: str, seconds: float) -> None:
    base, _ = bench_stack()
    names = modes.split(",")
    lines = lines_of(make_log(cards=max(500, txns // 20), txns=txns, seed=3))
    rates: dict[str, list[Backlog]] = {m: [] for m in names}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            order = names if pair % 2 == 0 else names[::-1]
            for mode in order:
                settings = fresh(mode_settings(base, mode), uuid.uuid4().hex[:6])
                try:
                    side = measure_backlog(settings, lines, Path(tmp))
                finally:
                    asyncio.run(drop_topics(settings))
                rates[mode].append(side)
                print(f"backlog pair {pair + 1} {mode:18s} {side.rate:9,.0f} ev/s "
                      f"({side.cpu_us:6.1f} µs worker CPU/ev)", flush=True)
        median = {m: statistics.median(b.rate for b in rates[m]) for m in names}
        ref = median[names[0]]
        for m in names:
            print(f"backlog median {m:18s} {median[m]:9,.0f} ev/s = {median[m] / ref:.3f}× "
                  f"{names[0]}", flush=True)
        live_lines = lines_of(make_log(cards=10_000, txns=int(
            max(float(s) for s in steps.split(",")) * ref * seconds * 1.05) + 1000, seed=5))
        results: list[Step] = []
        print(f"{'mode':18s} {'offered':>9s} {'p50 ms':>7s} {'p99 ms':>8s} {'in 50ms':>8s} "
              f"{'µs/ev':>6s} {'rows':>7s}", flush=True)
        for share in (float(s) for s in steps.split(",")):
            for mode in names:
                settings = fresh(mode_settings(base, mode), uuid.uuid4().hex[:6])
                try:
                    step = run_step(settings, mode, live_lines, share * ref, seconds, Path(tmp))
                finally:
                    asyncio.run(drop_topics(settings))
                results.append(step)
                print(f"{mode:18s} {step.offered:9,.0f} {step.p50:7.1f} {step.p99:8.1f} "
                      f"{step.within:8.1%} {step.cpu_us:6.1f} {step.rows:7d}   worker p99: "
                      f"acked ≤ {step.hops.get('outputs_acked', float('nan')):.0f} ms, served ≤ "
                      f"{step.hops.get('event_to_served', float('nan')):.0f} ms", flush=True)
    for m in names:
        slo = slo_rate([s for s in results if s.mode == m])
        print(f"SLO rate {m:18s} (p99 ≤ {BUDGET_MS:.0f} ms, read at its isolation level): "
              f"{slo:,.0f} ev/s", flush=True)


if __name__ == "__main__":
    main()
