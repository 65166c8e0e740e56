"""The Kafka client's own live cost: the raw consume → produce loop fed live, on aiokafka and
on librdkafka (confluent-kafka), at fixed offered rates.

    .venv/bin/python -m benchmarks.client_ceiling
    .venv/bin/python -m benchmarks.client_ceiling --rates 15000 --seconds 20 --rounds 3

The worker is built on aiokafka (Faust's transport, the exactly_once transactions), whose
protocol work runs in Python under the GIL; librdkafka does it in its own threads. What a change
of client could buy is bounded by what the client itself costs, so each step runs one loop as
benchmarks/live_load.py runs its raw loop fed live (`run_raw_step`: fresh topics, its own
process in its group before the input starts, `--seconds` of paced input, latency from each
copy's source position): `aiokafka` (live_load's raw loop: `getmany`, `send` per record),
`librdkafka` (a `Consumer`'s `consume` and a `Producer`'s `produce`), and `aiokafka+rd` (aiokafka's
consumer, librdkafka's producer: the output side alone). The loops alternate, in reverse order
every other round; per step p50 / p99 / cold p99 and CPU µs per event (the loop's process, every
thread), then each loop's medians by rate. PLAINTEXT stacks only (the local one).
"""

from __future__ import annotations

import asyncio
import statistics
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import click

from app.harness.pipeline import lines_of, make_log
from app.kafka import topics
from app.settings import Settings
from benchmarks.live_load import Step, run_raw_step
from benchmarks.pipeline_bench import bench_stack, raw_loop

#: librdkafka's producer as the worker's would be: acks from every in-sync replica, ordered
#: retries, a 2 ms linger (a batch's records go out in one request per broker)
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 2}
#: the most records one `consume` call takes (aiokafka's loop: `max_records=1000`)
CONSUME_MAX = 1000
#: `RdProducer` serves its delivery reports once every this many records
POLL_EVERY = 500


def _bootstrap(settings: Settings) -> dict[str, Any]:
    if settings.kafka_security_protocol != "PLAINTEXT":
        raise click.UsageError("client_ceiling.py runs on a PLAINTEXT stack (the local one)")
    return {"bootstrap.servers": settings.effective_kafka_bootstrap}


def _source(message: Any) -> list[tuple[str, bytes]]:
    return [("src", f"{message.partition()}:{message.offset()}".encode())]


def rd_loop(settings: Settings, total: int, ready: Any) -> None:  # noqa: ANN401
    """librdkafka both ways: `consume` what has arrived (waiting only for the first record),
    `produce` each with its source position, serve delivery reports between calls."""
    from confluent_kafka import Consumer, Producer

    consumer = Consumer({**_bootstrap(settings), "group.id": f"rd-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})
    producer = Producer({**_bootstrap(settings), **PRODUCER})
    consumer.subscribe([settings.topic(topics.TRANSACTIONS)])
    while not consumer.assignment():
        message = consumer.poll(0.1)
        if message is not None and not message.error():
            raise AssertionError("input arrived before the loop said it was ready")
    ready.set()
    sink = settings.topic(topics.ACTIONS_DLQ)  # as live_load's raw loop
    seen = 0
    try:
        while seen < total:
            batch = consumer.consume(1, timeout=0.5)
            if batch:
                batch += consumer.consume(CONSUME_MAX - 1, timeout=0)
            for message in batch:
                if message.error():
                    continue
                producer.produce(sink, message.value(), message.key(), headers=_source(message))
                seen += 1
            producer.poll(0)
        producer.flush(30)
    finally:
        consumer.close()


class RdProducer:
    """librdkafka's `Producer` behind the part of aiokafka's producer `raw_loop` uses: `send`
    queues the record (delivery reports served every `POLL_EVERY` records), `flush` waits for
    every delivery."""

    def __init__(self, settings: Settings) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({**_bootstrap(settings), **PRODUCER})
        self._queued = 0

    async def start(self) -> None:
        pass

    async def send(self, topic: str, *, value: bytes, key: bytes | None,
                   headers: list[tuple[str, bytes]] | None) -> None:
        self._producer.produce(topic, value, key, headers=headers)
        self._queued += 1
        if self._queued % POLL_EVERY == 0:
            self._producer.poll(0)

    async def flush(self) -> None:
        self._producer.flush(30)

    async def stop(self) -> None:
        pass


def mixed_loop(settings: Settings, total: int, ready: Any) -> None:  # noqa: ANN401
    """aiokafka's consumer (live_load's raw loop itself), librdkafka's producer."""
    asyncio.run(raw_loop(settings, total, tag=True, ready=ready.set,
                         producer=RdProducer(settings)))


#: loop name → what runs in the step's process (None: live_load's own aiokafka loop)
LOOPS: dict[str, Callable[[Settings, int, Any], None] | None] = {
    "aiokafka": None, "librdkafka": rd_loop, "aiokafka+rd": mixed_loop}


def row(label: str, step: Step) -> str:
    return (f"{label:<24s} {step.offered:8,.0f} {step.steady_p50:6.1f} {step.steady_p99:7.1f} "
            f"{step.cold_p99:8.1f} {step.cpu_us:6.1f} {step.stolen:6.3f}")


@click.command()
@click.option("--rates", default="5000,15000,25000", show_default=True,
              help="Offered ev/s, comma-separated.")
@click.option("--seconds", type=float, default=12, show_default=True, help="Input per step.")
@click.option("--rounds", type=int, default=2, show_default=True,
              help="Steps of each loop per rate (alternating).")
@click.option("--loops", default=",".join(LOOPS), show_default=True,
              help="Which loops, comma-separated.")
def main(rates: str, seconds: float, rounds: int, loops: str) -> None:
    offered = [float(r) for r in rates.split(",")]
    names = [n.strip() for n in loops.split(",")]
    unknown = sorted(set(names) - set(LOOPS))
    if unknown:
        raise click.UsageError(f"unknown loops {unknown}: choose from {sorted(LOOPS)}")
    base, _ = bench_stack()
    _bootstrap(base)
    lines = lines_of(make_log(cards=10_000, txns=int(max(offered) * seconds * 1.05), seed=5))
    results: dict[tuple[str, float], list[Step]] = defaultdict(list)
    print(f"{'loop':<24s} {'offered':>8s} {'p50':>6s} {'p99':>7s} {'cold p99':>8s} "
          f"{'µs/ev':>6s} {'stolen':>6s}", flush=True)
    for n in range(rounds):
        for rate in offered:
            for name in (names if n % 2 == 0 else names[::-1]):
                step = run_raw_step(base, lines, rate, seconds, LOOPS[name])
                results[(name, rate)].append(step)
                print(row(f"{n + 1}: {name}", step), flush=True)
    print(f"medians of {rounds} (CPU per event as a ratio of aiokafka's, same rate):")
    for rate in offered:
        base_cpu = (statistics.median(s.cpu_us for s in results[("aiokafka", rate)])
                    if "aiokafka" in names else None)
        for name in names:
            steps = results[(name, rate)]
            cpu = statistics.median(s.cpu_us for s in steps)
            ratio = f"  {cpu / base_cpu:.2f}×" if base_cpu else ""
            print(f"{name:<24s} {rate:8,.0f} "
                  f"{statistics.median(s.steady_p50 for s in steps):6.1f} "
                  f"{statistics.median(s.steady_p99 for s in steps):7.1f} "
                  f"{statistics.median(s.cold_p99 for s in steps):8.1f} {cpu:6.1f}{ratio}",
                  flush=True)


if __name__ == "__main__":
    main()
