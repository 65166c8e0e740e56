"""Benchmark: card state at scale. N cards folded, then RSS per card, restart and failover times.

    .venv/bin/python benchmarks/state_bench.py --cards 1000000 --txns 4000000
    .venv/bin/python benchmarks/state_bench.py --cards 50000 --txns 200000 --stores rocksdb,memory

For each store (`--stores`; the first is the one measured, the others its baseline, run on the
same log in the same run): fresh topics, one worker (no dispatch) started and idle (its RSS is
the "fresh worker"), the log replayed and folded (cards/s), then

- RSS per card held: (RSS after the fold − fresh RSS) / distinct cards;
- restart: SIGKILL, the same worker (same port, so the same state directory) started again and a
  new transaction produced at once; time from the process start to its served row;
- cold restore: SIGKILL, the state directory deleted, started again: the same time, and the
  changelog records it read back per second (the worker's own log line);
- failover: a second worker joins (standby replicas keep each other's partitions warm); once its
  standbys have caught up, the first is SIGKILLed and a new transaction per partition it owned
  is produced; time from the kill to the last of them served by the survivor.

Printed as a table with the baseline stores' figures and their ratios to the first store's.
Every process it starts is ended by its PID; topics are deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from app.datagen.config import GeneratorConfig
from app.datagen.generator import generate_log
from app.harness.pipeline import drop_quietly, replay, wait_drained
from app.harness.procs import (
    Spawned,
    free_port,
    settings_env,
    source_reads,
    wait_all_assigned,
    wait_until,
)
from app.kafka import topics
from app.kafka.sink import partition_for
from app.kafka.topics import ensure_topics
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings, load_settings

_RESTORED = re.compile(r"restored (\d+) changelog records of \d+ partitions in ([\d.]+)s")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def spawn(settings: Settings, tmp: Path, port: int, name: str) -> Spawned:
    """A worker on `port`: its state directory is state/worker-<port>, kept across restarts."""
    argv = [sys.executable, "-m", "app.cli.main", "worker", "--web-port", str(port),
            "--loglevel", "INFO", "--no-dispatch"]
    env = settings_env(settings.replace(state_dir=tmp / "state"))
    return Spawned(argv, env, tmp / f"{name}-{port}.log", port)


def probe_txn(card: str, ts_ms: int) -> tuple[str, bytes]:
    txn_id = f"probe-{uuid.uuid4().hex[:16]}"
    return txn_id, orjson.dumps({
        "txn_id": txn_id, "card_id": card, "ts_ms": ts_ms, "amount_minor": 1234,
        "currency": "EUR", "merchant_id": "m-probe", "mcc": 5411, "country": "FR",
        "channel": "pos"})


async def _served_after(settings: Settings, produce: list[tuple[str, bytes]], t0: float,
                        timeout_s: float) -> float:
    """Produce the probes now; seconds from `t0` until every probe's served row is read."""
    client = kafka_client_kwargs(settings)
    served = settings.topic(topics.FEATURES_SERVED)
    consumer = AIOKafkaConsumer(served, **client, enable_auto_commit=False,
                                auto_offset_reset="latest", group_id=None)
    await consumer.start()
    producer = AIOKafkaProducer(**client, acks="all")
    await producer.start()
    try:
        parts = consumer.partitions_for_topic(served) or set()
        from aiokafka import TopicPartition
        tps = [TopicPartition(served, p) for p in parts]
        consumer.unsubscribe()
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, ends[tp])
        for _txn_id, value in produce:
            card = orjson.loads(value)["card_id"].encode()
            await producer.send_and_wait(settings.topic(topics.TRANSACTIONS), value=value, key=card)
        missing = {txn_id for txn_id, _ in produce}
        deadline = time.monotonic() + timeout_s
        while missing and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for rec in records:
                    if rec.value and b'"probe-' in rec.value:
                        missing.discard(orjson.loads(rec.value).get("txn_id"))
        if missing:
            raise AssertionError(f"probes not served within {timeout_s}s: {sorted(missing)}")
        return time.monotonic() - t0
    finally:
        await producer.stop()
        await consumer.stop()


def served_after(settings: Settings, probes: list[tuple[str, bytes]], t0: float,
                 timeout_s: float = 600.0) -> float:
    return asyncio.run(_served_after(settings, probes, t0, timeout_s))


def restored_rate(log_path: Path, since: int) -> tuple[int, float]:
    """(records, records/s) of the restore lines the worker logged after byte `since`."""
    text = log_path.read_bytes()[since:].decode(errors="replace")
    records = seconds = 0.0
    for m in _RESTORED.finditer(text):
        records += int(m.group(1))
        seconds += float(m.group(2))
    return int(records), (records / seconds if seconds else 0.0)


def run_store(store: str, base: Settings, lines: list[bytes], cards: list[str], last_ts: int,
              args: argparse.Namespace) -> dict[str, Any]:
    settings = base.replace(store=store, topic_prefix=f"statebench-{uuid.uuid4().hex[:8]}-",
                            app_id=f"statebench-{uuid.uuid4().hex[:8]}")
    out: dict[str, Any] = {"store": store}
    tmp = Path(tempfile.mkdtemp(prefix="state-bench-"))
    workers: list[Spawned] = []
    source = settings.topic(topics.TRANSACTIONS)
    try:
        asyncio.run(ensure_topics(settings))
        port = free_port()
        a = spawn(settings, tmp, port, "a")
        workers.append(a)
        wait_all_assigned([a], source, timeout_s=180)
        time.sleep(2.0)  # let start-up allocations settle before the fresh figure
        fresh = rss_bytes(a.pid)
        t0 = time.monotonic()
        replay(settings, lines)
        wait_drained(settings, [a], expected=len(lines), timeout_s=args.timeout)
        out["fold_s"] = time.monotonic() - t0
        out["txn_per_s"] = len(lines) / out["fold_s"]
        time.sleep(1.0)
        out["fresh_rss_mb"] = fresh / 2**20
        out["rss_mb"] = rss_bytes(a.pid) / 2**20
        out["rss_per_card_b"] = (rss_bytes(a.pid) - fresh) / len(cards)
        ts = last_ts + 1000

        # restart after SIGKILL, local state kept
        a.kill()
        since = a.log_path.stat().st_size if a.log_path.exists() else 0
        t0 = time.monotonic()
        a = spawn(settings, tmp, port, "a")
        workers.append(a)
        out["restart_s"] = served_after(settings, [probe_txn(cards[0], ts)], t0)
        ts += 1000
        out["restart_restored"], _ = restored_rate(a.log_path, since)

        # cold restore: SIGKILL, local state deleted
        a.kill()
        shutil.rmtree(tmp / "state" / f"worker-{port}", ignore_errors=True)
        since = a.log_path.stat().st_size
        t0 = time.monotonic()
        a = spawn(settings, tmp, port, "a")
        workers.append(a)
        out["cold_s"] = served_after(settings, [probe_txn(cards[1], ts)], t0)
        ts += 1000
        out["cold_records"], out["cold_rate"] = restored_rate(a.log_path, since)

        if args.failover:
            b = spawn(settings, tmp, free_port(), "b")
            workers.append(b)
            wait_all_assigned([a, b], source, timeout_s=180)

            def standbys_ready() -> bool:
                # Faust's standby lag leaves out partitions it has read nothing of yet (offset
                # -1), so it is 0 as the second worker joins. It restores its actives and its
                # standbys (all the partitions, here) from nothing: at least the records the
                # cold restore above read of the same changelog.
                page = b.debug("consumer")["cards"]
                return (bool(page["standbys"]) and page["standby_lag"] == 0
                        and page["restored"] >= out["cold_records"])

            wait_until(standbys_ready, timeout_s=args.timeout, interval_s=0.5,
                       what="the second worker's standbys to catch up")
            owned = {int(tp.rsplit(":", 1)[1]) for tp in source_reads(a, source)}
            probes = []
            for p in sorted(owned):
                card = next(c for c in cards
                            if partition_for(c.encode(), b"", settings.topic_partitions) == p)
                probes.append(probe_txn(card, ts))
            a.kill()
            t0 = time.monotonic()
            out["failover_s"] = served_after(settings, probes, t0)
            out["failover_partitions"] = len(probes)
        return out
    finally:
        for w in workers:
            w.kill()
        drop_quietly(settings)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cards", type=int, default=1_000_000)
    parser.add_argument("--txns", type=int, default=4_000_000)
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--stores", default="rocksdb,memory",
                        help="comma-separated; the first is measured, the rest are baselines")
    parser.add_argument("--no-failover", dest="failover", action="store_false")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per wait, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the workers' logs and state")
    args = parser.parse_args()
    base = load_settings()
    t0 = time.monotonic()
    log = generate_log(GeneratorConfig(cards=args.cards, txns=args.txns, days=args.days))
    lines = [line for line, _ in log.iter_lines()]
    cards_seen: dict[str, None] = {}
    last_ts = 0
    for line in lines:
        obj = orjson.loads(line)
        cards_seen[obj["card_id"]] = None
        last_ts = max(last_ts, obj["ts_ms"])
    cards = list(cards_seen)
    print(f"log: {len(lines):,} transactions, {len(cards):,} cards "
          f"(generated in {time.monotonic() - t0:.0f}s)", flush=True)
    results = []
    for store in args.stores.split(","):
        res = run_store(store, base, lines, cards, last_ts, args)
        print(orjson.dumps(res).decode(), flush=True)
        results.append(res)
    rows = [("fold (txn/s)", "txn_per_s", "{:,.0f}"),
            ("worker RSS after the fold (MiB)", "rss_mb", "{:,.0f}"),
            ("RSS per card above a fresh worker (bytes)", "rss_per_card_b", "{:,.0f}"),
            ("restart after SIGKILL → new txn served (s)", "restart_s", "{:.1f}"),
            ("changelog records read on that restart", "restart_restored", "{:,}"),
            ("cold restart (state deleted) → served (s)", "cold_s", "{:.1f}"),
            ("cold restore rate (changelog records/s)", "cold_rate", "{:,.0f}"),
            ("changelog records read on the cold restore", "cold_records", "{:,}"),
            ("one of two SIGKILLed → its partitions served (s)", "failover_s", "{:.1f}")]
    head = "| figure | " + " | ".join(r["store"] for r in results)
    head += "".join(f" | {r['store']} / {results[0]['store']}" for r in results[1:]) + " |"
    print(head)
    print("|---" * (1 + 2 * len(results) - 1) + "|")
    for label, key, fmt in rows:
        cells = [fmt.format(r[key]) if key in r else "–" for r in results]
        ratios = []
        for r in results[1:]:
            with contextlib.suppress(KeyError, ZeroDivisionError, TypeError):
                ratios.append(f"{r[key] / results[0][key]:.2f}")
                continue
            ratios.append("–")
        print(f"| {label} | " + " | ".join(cells + ratios) + " |")


if __name__ == "__main__":
    main()
