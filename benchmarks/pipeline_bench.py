"""One worker's end-to-end events/s next to a raw aiokafka consume→produce loop, same broker, same run.

    .venv/bin/python benchmarks/pipeline_bench.py --txns 50000 --pairs 3

Both sides read the same pre-filled transactions topic from offset 0. The baseline consumes and
produces each message unchanged (the floor any Kafka stream processor pays); the worker validates,
folds card state (changelog writes), scores with ONNX and produces served rows and actions. The
worker's clock starts at its first served row (start-up and group join excluded) and stops when
its lag reaches 0. The worker's longest event-loop stall is read from its /metrics.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.settings import Settings, load_settings  # noqa: E402
from app.stack.manager import Stack  # noqa: E402
from app.stream import topics  # noqa: E402
from app.stream.inspect import group_lag, topic_sizes  # noqa: E402
from app.stream.topics import drop_topics, ensure_topics  # noqa: E402
from tests.support.pipeline import lines_of, make_log, replay  # noqa: E402
from tests.support.procs import spawn_worker, wait_until  # noqa: E402


async def raw_loop(settings: Settings, total: int) -> float:
    """events/s of consume → produce (same bytes) with aiokafka, committing as it goes."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(settings.topic(topics.TRANSACTIONS),
                                bootstrap_servers=settings.effective_kafka_bootstrap,
                                group_id=f"raw-{uuid.uuid4().hex[:6]}",
                                auto_offset_reset="earliest", enable_auto_commit=True)
    producer = AIOKafkaProducer(bootstrap_servers=settings.effective_kafka_bootstrap, acks="all",
                                linger_ms=5)
    await consumer.start()
    await producer.start()
    seen = 0
    t0 = None
    try:
        while seen < total:
            batch = await consumer.getmany(timeout_ms=500, max_records=1000)
            for msgs in batch.values():
                if t0 is None and msgs:
                    t0 = time.perf_counter()
                for m in msgs:
                    # the sink is a pipeline topic the worker's clock does not watch
                    await producer.send(settings.topic(topics.ACTIONS_DLQ),
                                        value=m.value, key=m.key)
                seen += len(msgs)
        await producer.flush()
        return seen / (time.perf_counter() - (t0 or time.perf_counter()))
    finally:
        await consumer.stop()
        await producer.stop()


def worker_rate(settings: Settings, total: int, served_expected: int, tmp: Path) -> tuple[float, str]:
    served = settings.topic(topics.FEATURES_SERVED)
    worker = spawn_worker(settings, tmp, dispatch=False)
    try:
        wait_until(lambda: asyncio.run(topic_sizes(settings, [served]))[served] > 0,
                   timeout_s=120, interval_s=0.05, what="the first served row")
        t0 = time.perf_counter()
        wait_until(lambda: asyncio.run(group_lag(settings, settings.app_id,
                                                 settings.topic(topics.TRANSACTIONS))) == 0,
                   timeout_s=600, interval_s=0.2, what="lag 0")
        elapsed = time.perf_counter() - t0
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/metrics",  # noqa: S310
                                    timeout=5) as resp:
            text = resp.read().decode()
        stall = next((line.split()[-1] for line in text.splitlines()
                      if line.startswith("fraudstream_event_loop_lag_max_seconds ")), "?")
    finally:
        worker.stop()
    return total / elapsed, stall


@click.command()
@click.option("--txns", default=50_000, show_default=True)
@click.option("--batches", default="512", show_default=True, help="max_batch values to try.")
@click.option("--pairs", default=3, show_default=True,
              help="raw loop / worker runs, alternating, per max_batch (median reported).")
def main(txns: int, batches: str, pairs: int) -> None:
    base = load_settings()
    Stack(base).up()
    base = base.replace(kafka_bootstrap=base.effective_kafka_bootstrap,
                        redis_url=base.effective_redis_url)
    log = make_log(cards=max(500, txns // 20), txns=txns, seed=3)
    lines = lines_of(log)
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(b) for b in batches.split(",")]:
            ratios = []
            for pair in range(pairs):
                tag = uuid.uuid4().hex[:6]
                settings = base.replace(topic_prefix=f"bench{tag}.", app_id=f"bench-{tag}",
                                        max_batch=size)
                asyncio.run(ensure_topics(settings))
                replay(settings, lines)
                raw = asyncio.run(raw_loop(settings, len(lines)))
                rate, stall = worker_rate(settings, len(lines), len(lines), Path(tmp))
                ratios.append(rate / raw)
                print(f"max_batch={size:4d} pair {pair + 1}  raw consume->produce {raw:9,.0f} "
                      f"ev/s   worker {rate:8,.0f} ev/s   ratio {rate / raw:.3f}   "
                      f"max loop stall {float(stall) * 1000:.1f} ms", flush=True)
                asyncio.run(drop_topics(settings))
            ratios.sort()
            print(f"max_batch={size:4d}  median ratio {ratios[len(ratios) // 2]:.3f}  "
                  f"(min {ratios[0]:.3f}, max {ratios[-1]:.3f}, {pairs} pairs)", flush=True)


if __name__ == "__main__":
    main()
