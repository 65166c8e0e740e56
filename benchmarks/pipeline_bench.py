"""One worker against a raw aiokafka consume→produce loop on the same broker, then latency at 30 %.

    .venv/bin/python -m benchmarks.pipeline_bench                   # 200k transactions, 3 pairs
    .venv/bin/python -m benchmarks.pipeline_bench --txns 50000 --pairs 1 --no-docs  # a quick look

Throughput: the raw loop and the worker alternate, each pair on fresh topics pre-filled with the
same log. Both rates are taken from broker timestamps: the bench topics use LogAppendTime, and a
side's rate is its output records divided by the span between the first and the last append
of its output topic, so nothing (no admin polling, no start-up) inside the measured window is
counted. Completion is watched outside Kafka (the worker's /metrics, the raw loop's own count).
CPU per event is read from /proc for the worker, the broker and this process (the raw loop).

Latency: a worker (defaults, no dispatch) is fed at 30 % of the median worker rate; event →
served row and event → action are broker append of the transaction → broker append of the
served row / action, and the worker's per-hop histograms are read from its /metrics. The first
LATENCY_WARMUP_S of input is replayed and handled before the measured part (see `latency_run`);
the per-hop histograms include it.

It prints the figures and, unless --no-docs, writes docs/benchmarks.md and PNG plots beside it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import orjson

from app.harness.pipeline import lines_of, make_log, replay
from app.harness.procs import Spawned, spawn_worker, wait_until
from app.kafka import topics
from app.kafka.inspect import admin_client, read_topic
from app.kafka.topics import drop_topics, ensure_topics
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings, load_settings
from app.stack.manager import Stack

DOCS = Path(__file__).resolve().parents[1] / "docs"
TICK = os.sysconf("SC_CLK_TCK")
#: Latency run: seconds of input replayed (and waited for) before the measured part
LATENCY_WARMUP_S = 2.0


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


async def log_append_time(settings: Settings, logical: list[str]) -> None:
    """Make the bench topics stamp records with the broker's append time."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async with admin_client(settings) as admin:
        await admin.alter_configs([
            ConfigResource(ConfigResourceType.TOPIC, settings.topic(name),
                           configs={"message.timestamp.type": "LogAppendTime"})
            for name in logical])


async def append_span(settings: Settings, logical: str) -> tuple[int, int, int]:
    """(records, first append ms, last append ms) of a topic, from its first and last records."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    name = settings.topic(logical)
    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings),
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(name, p) for p in sorted(consumer.partitions_for_topic(name)
                                                       or await _partitions(consumer, name))]
        consumer.assign(tps)
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        count, first, last = 0, None, None
        for tp in tps:
            if ends[tp] <= starts[tp]:
                continue
            count += ends[tp] - starts[tp]
            for offset in (starts[tp], ends[tp] - 1):
                consumer.seek(tp, offset)
                msg = await asyncio.wait_for(consumer.getone(tp), 30)
                first = msg.timestamp if first is None else min(first, msg.timestamp)
                last = msg.timestamp if last is None else max(last, msg.timestamp)
        return count, first or 0, last or 0
    finally:
        await consumer.stop()


async def _partitions(consumer: object, name: str) -> set[int]:
    await consumer._client.force_metadata_update()  # noqa: SLF001
    return consumer.partitions_for_topic(name) or set()  # type: ignore[attr-defined]


async def raw_loop(settings: Settings, total: int, *, tag: bool = False,
                   ready: Callable[[], None] | None = None, producer: Any = None) -> None:
    """Consume → produce (same bytes) with aiokafka, committing as it goes. `tag`: each copy
    carries its source position in a `src` header (`partition:offset`, for latency);
    `ready` is called once the consumer owns its partitions; `producer`: another unstarted
    producer with aiokafka's `start` / `send` / `flush` / `stop` (default: aiokafka's, acks from
    every in-sync replica, 5 ms linger)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(settings.topic(topics.TRANSACTIONS),
                                **kafka_client_kwargs(settings),
                                group_id=f"raw-{uuid.uuid4().hex[:6]}",
                                auto_offset_reset="earliest", enable_auto_commit=True)
    if producer is None:
        producer = AIOKafkaProducer(**kafka_client_kwargs(settings), acks="all", linger_ms=5)
    await consumer.start()
    await producer.start()
    seen = 0
    sink = settings.topic(topics.ACTIONS_DLQ)  # a pipeline topic no worker writes here
    try:
        while ready is not None and not consumer.assignment():
            batch = await consumer.getmany(timeout_ms=100)  # joins the group; nothing fed yet
            assert not batch, "input arrived before the raw loop said it was ready"
        if ready is not None:
            ready()
        while seen < total:
            batch = await consumer.getmany(timeout_ms=500, max_records=1000)
            for msgs in batch.values():
                for m in msgs:
                    headers = [("src", f"{m.partition}:{m.offset}".encode())] if tag else None
                    await producer.send(sink, value=m.value, key=m.key, headers=headers)
                seen += len(msgs)
        await producer.flush()
    finally:
        await consumer.stop()
        await producer.stop()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:  # noqa: S310
        return resp.read().decode()


def metric_sum(text: str, name: str) -> float:
    """The sum of every sample of `name` (all labels)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


def handled(port: int) -> float:
    """Messages the worker is done with: served, dead-lettered or routed late."""
    try:
        text = scrape(port)
    except OSError:
        return 0.0  # not serving yet
    return sum(metric_sum(text, n) for n in ("fraudstream_scored_total",
                                              "fraudstream_dlq_messages_total",
                                              "fraudstream_late_messages_total"))


def hop_quantiles(text: str, qs: tuple[float, ...] = (0.5, 0.99)) -> dict[str, list[float]]:
    """Per hop, the upper bound of the histogram bucket holding each quantile (seconds)."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    for line in text.splitlines():
        if not line.startswith("fraudstream_hop_seconds_bucket{"):
            continue
        labels, value = line.rsplit(" ", 1)
        hop = labels.split('hop="', 1)[1].split('"', 1)[0]
        le = labels.split('le="', 1)[1].split('"', 1)[0]
        buckets.setdefault(hop, []).append((float("inf") if le == "+Inf" else float(le),
                                            float(value)))
    out = {}
    for hop, rows in buckets.items():
        rows.sort()
        total = rows[-1][1]
        if total == 0:
            continue
        out[hop] = [next(le for le, n in rows if n >= q * total) for q in qs]
    return out


@dataclass
class Side:
    rate: float
    cpu_us_per_event: float
    broker_us_per_event: float


def fresh(base: Settings, tag: str) -> Settings:
    settings = base.replace(topic_prefix=f"bench{tag}.", app_id=f"bench-{tag}")
    asyncio.run(ensure_topics(settings))
    asyncio.run(log_append_time(settings, [topics.TRANSACTIONS, topics.FEATURES_SERVED,
                                           topics.ACTIONS, topics.ACTIONS_DLQ]))
    return settings


def measure_raw(settings: Settings, total: int, broker_pid: int | None) -> Side:
    c0, b0 = time.process_time(), cpu_s(broker_pid)
    asyncio.run(raw_loop(settings, total))
    cpu, broker = time.process_time() - c0, cpu_s(broker_pid) - b0
    n, first, last = asyncio.run(append_span(settings, topics.ACTIONS_DLQ))
    return Side(n / max(1e-3, (last - first) / 1000), cpu / total * 1e6, broker / total * 1e6)


def start_worker(settings: Settings, tmp: Path) -> Spawned:
    worker = spawn_worker(settings, tmp, dispatch=False)
    wait_until(lambda: _assigned(worker.port), timeout_s=120, interval_s=0.2,
               what="the worker's partitions")
    return worker


def debug_consumer(port: int, *, light: bool = False) -> dict[str, Any] | None:
    """The worker's /debug/consumer page, None while it does not answer; `light` leaves out
    what costs a pass over the cached cards (a probe that runs while latency is measured)."""
    query = "?light=1" if light else ""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/consumer{query}",  # noqa: S310
                                    timeout=2) as resp:
            return orjson.loads(resp.read())
    except OSError:
        return None


def _assigned(port: int) -> bool:
    state = debug_consumer(port)
    return state is not None and any(name.split(":")[0].endswith(topics.TRANSACTIONS)
                                     for name in state["partitions"])


def measure_worker(settings: Settings, total: int, tmp: Path, broker_pid: int | None,
                   tree: Path | None = None) -> Side:
    worker = spawn_worker(settings, tmp, dispatch=False, tree=tree)
    try:
        # CPU counted from the first handled message: start-up and group join are not work
        done = wait_until(lambda: handled(worker.port), timeout_s=120, interval_s=0.05,
                          what="the first handled transaction")
        w0, b0 = cpu_s(worker.pid), cpu_s(broker_pid)
        wait_until(lambda: handled(worker.port) >= total, timeout_s=900, interval_s=0.5,
                   what="every transaction handled")
        cpu, broker = cpu_s(worker.pid) - w0, cpu_s(broker_pid) - b0
    finally:
        worker.stop()
    work = max(1.0, total - done)
    n, first, last = asyncio.run(append_span(settings, topics.FEATURES_SERVED))
    return Side(n / max(1e-3, (last - first) / 1000), cpu / work * 1e6, broker / work * 1e6)


def latency_run(settings: Settings, lines: list[bytes], rate: float, tmp: Path, *,
                warmup: int = 0) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """Feed `lines` at `rate`; (event → served/action latencies in ms, per-hop quantiles, n).

    The first `warmup` lines go first, at the same rate, and are waited for; only the rest is
    measured. A fresh worker's first batches wait for the card changelog topic it has just
    created (its first produce requests meet a leader still being elected: 50-80 ms each),
    which says how a new deployment starts, not how a running one keeps up.
    """
    worker = start_worker(settings, tmp)
    try:
        if warmup:
            replay(settings, lines[:warmup], rate=rate)
            wait_until(lambda: handled(worker.port) >= warmup, timeout_s=120, interval_s=0.2,
                       what="the warm-up transactions handled")
        measured_from_ms = time.time_ns() // 1_000_000
        replay(settings, lines[warmup:], rate=rate)
        wait_until(lambda: handled(worker.port) >= len(lines), timeout_s=300, interval_s=0.5,
                   what="every transaction handled")
        hops = hop_quantiles(scrape(worker.port))
    finally:
        worker.stop()
    appended = {(r.partition, r.offset): r.timestamp_ms
                for r in asyncio.run(read_topic(settings, settings.topic(topics.TRANSACTIONS)))}
    served_ms, source_of = [], {}
    for r in asyncio.run(read_topic(settings, settings.topic(topics.FEATURES_SERVED))):
        row = orjson.loads(r.value)
        source = appended[(row["partition"], row["offset"])]
        source_of[row["txn_id"]] = source
        if source >= measured_from_ms:
            served_ms.append(r.timestamp_ms - source)
    action_ms = [r.timestamp_ms - source
                 for r in asyncio.run(read_topic(settings, settings.topic(topics.ACTIONS)))
                 if (source := source_of[orjson.loads(r.value)["txn_id"]]) >= measured_from_ms]
    return ({"event → served row": served_ms, "event → action": action_ms}, hops,
            len(lines) - warmup)


def bench_stack() -> tuple[Settings, int | None]:
    """The local stack up; settings pointing at it, and the broker's PID (None: external)."""
    base = load_settings()
    stack = Stack(base)
    stack.up()
    broker_pid = stack.kafka.process.pid() if stack.manages_kafka else None
    return base.replace(kafka_bootstrap=base.effective_kafka_bootstrap,
                        redis_url=base.effective_redis_url), broker_pid


def backlog_pair(base: Settings, lines: list[bytes], tmp: Path, broker_pid: int | None,
                 against: Path | None = None, *, against_first: bool = False,
                 ) -> tuple[Side, Side, Side | None]:
    """The raw loop, then the worker (and `against`'s worker, before or after it), each on
    fresh topics pre-filled with `lines`."""
    trees: list[Path | None] = [None] if against is None else (
        [against, None] if against_first else [None, against])
    raw = _backlog_side(base, lines, lambda s: measure_raw(s, len(lines), broker_pid))
    measured = {tree: _backlog_side(base, lines, lambda s, t=tree: measure_worker(
        s, len(lines), tmp, broker_pid, tree=t)) for tree in trees}
    return raw, measured[None], measured.get(against) if against is not None else None


def _backlog_side(base: Settings, lines: list[bytes], measure: Callable[[Settings], Side]) -> Side:
    settings = fresh(base, uuid.uuid4().hex[:6])
    replay(settings, lines)
    try:
        return measure(settings)
    finally:
        asyncio.run(drop_topics(settings))


def print_against(raws: list[Side], workers: list[Side], others: list[Side],
                  against: Path | None) -> None:
    """This worker against the other checkout's: the rate ratio per pair and overall."""
    per_pair = sorted(w.rate / a.rate for w, a in zip(workers, others, strict=True))
    mine = statistics.median(w.rate / r.rate for r, w in zip(raws, workers, strict=True))
    theirs = statistics.median(a.rate / r.rate for r, a in zip(raws, others, strict=True))
    cpu = statistics.median(w.cpu_us_per_event / a.cpu_us_per_event
                            for w, a in zip(workers, others, strict=True))
    print(f"against {against}: worker / against {statistics.median(per_pair):.3f} median of "
          f"{len(per_pair)} pairs (min {per_pair[0]:.3f}, max {per_pair[-1]:.3f}); "
          f"of the raw loop {mine:.3f} against {theirs:.3f} (ratio of medians "
          f"{mine / theirs:.3f}); worker CPU per event {cpu:.3f}x", flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def slo_rate(steps: Iterable[Any]) -> float:
    """The highest offered rate within budget with every lower step within budget too (each
    step has `offered` and `ok`)."""
    best = 0.0
    for step in sorted(steps, key=lambda s: s.offered):
        if not step.ok:
            break
        best = step.offered
    return best


@click.command()
@click.option("--txns", default=200_000, show_default=True)
@click.option("--pairs", default=3, show_default=True, help="Raw loop / worker runs, alternating.")
@click.option("--load", default=0.3, show_default=True, help="Latency run: share of the median rate.")
@click.option("--latency-seconds", default=30.0, show_default=True)
@click.option("--docs/--no-docs", default=True, show_default=True,
              help="Write docs/benchmarks.md and its plots.")
@click.option("--against", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Another checkout (extensions built in place: `python setup.py build_ext "
                   "--inplace` or a wheel's .so files) whose worker runs beside this one in every "
                   "pair, on the same log, first in every other pair: this worker's rate as a "
                   "ratio of that one's in one run.")
def main(txns: int, pairs: int, load: float, latency_seconds: float, docs: bool,
         against: Path | None) -> None:
    base, broker_pid = bench_stack()
    lines = lines_of(make_log(cards=max(500, txns // 20), txns=txns, seed=3))
    raws: list[Side] = []
    workers: list[Side] = []
    others: list[Side] = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            r, w, a = backlog_pair(base, lines, Path(tmp), broker_pid, against,
                                   against_first=pair % 2 == 1)
            raws.append(r)
            workers.append(w)
            print(f"pair {pair + 1}: raw {r.rate:9,.0f} ev/s ({r.cpu_us_per_event:5.1f} µs CPU/ev, "
                  f"broker {r.broker_us_per_event:5.1f})   worker {w.rate:8,.0f} ev/s "
                  f"({w.cpu_us_per_event:6.1f} µs CPU/ev, broker {w.broker_us_per_event:5.1f})"
                  f"   ratio {w.rate / r.rate:.3f}", flush=True)
            if a is not None:
                others.append(a)
                cpu = w.cpu_us_per_event / a.cpu_us_per_event
                print(f"        against {a.rate:8,.0f} ev/s ({a.cpu_us_per_event:6.1f} µs CPU/ev, "
                      f"broker {a.broker_us_per_event:5.1f})   ratio {a.rate / r.rate:.3f}   "
                      f"worker / against {w.rate / a.rate:.3f} (CPU {cpu:.3f})", flush=True)
        ratios = sorted(w.rate / r.rate for r, w in zip(raws, workers, strict=True))
        median_worker = statistics.median(w.rate for w in workers)
        print(f"median ratio {statistics.median(ratios):.3f} (min {ratios[0]:.3f}, max "
              f"{ratios[-1]:.3f}, {pairs} pairs); median worker {median_worker:,.0f} ev/s, "
              f"median raw {statistics.median(r.rate for r in raws):,.0f} ev/s", flush=True)
        if others:
            print_against(raws, workers, others, against)

        rate = load * median_worker
        warmup = int(rate * LATENCY_WARMUP_S)
        count = min(len(lines), warmup + max(1000, int(rate * latency_seconds)))
        settings = fresh(base, uuid.uuid4().hex[:6])
        try:
            latencies, hops, n = latency_run(settings, lines[:count], rate, Path(tmp),
                                             warmup=warmup)
        finally:
            asyncio.run(drop_topics(settings))
    print(f"latency at {load:.0%} load ({rate:,.0f} ev/s, {n} transactions measured after "
          f"{warmup:,} warm-up ones):")
    for name, values in latencies.items():
        print(f"  {name:20s} p50 {pct(values, 0.5):6.1f} ms  p99 {pct(values, 0.99):6.1f} ms  "
              f"max {max(values, default=float('nan')):7.1f} ms  ({len(values)} records)")
    for hop, (p50, p99) in sorted(hops.items()):
        print(f"  hop {hop:18s} p50 ≤ {p50 * 1000:7.1f} ms  p99 ≤ {p99 * 1000:7.1f} ms")
    if docs:
        from benchmarks.bench_report import write_report

        write_report(DOCS, raws, workers, ratios, latencies, hops, load=load, rate=rate,
                     txns=len(lines), command=" ".join(["python -m benchmarks.pipeline_bench",
                                                        *sys.argv[1:]]))
        print(f"wrote {DOCS / 'benchmarks.md'}")


if __name__ == "__main__":
    main()
