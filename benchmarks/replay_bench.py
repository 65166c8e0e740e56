"""Benchmark: `replay_messages` against a plain aiokafka send loop, side by side in one run.

Both produce the same generated log, in order and keyed by card_id, to fresh topics on the
running stack (`fraudstream stack up`) with the same producer settings (acks=all, idempotence,
256 KB batches); the baseline is what a replay tool usually is: `await producer.send()` per
message (linger 5 ms), paced, where asked, by sleeping until each message is due. Printed per
round: messages/s and the producing process's CPU per message, unpaced and paced at --rate
(where the CPU is what a load generator takes from the machine it shares), and the ratios.

    python benchmarks/replay_bench.py [--messages 100000] [--rate 3000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import AIOKafkaProducer

from app.harness.pipeline import lines_of, make_log
from app.kafka import topics
from app.kafka.replay import replay_messages
from app.kafka.topics import drop_topics, ensure_topics
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings, load_settings
from app.transactions.logfile import card_key

Replay = Callable[[Settings, Sequence[bytes], float | None], Awaitable[int]]


async def send_loop(settings: Settings, lines: Sequence[bytes], rate: float | None) -> int:
    """The baseline: one `send` per message, a sleep until each is due when paced."""
    producer = AIOKafkaProducer(**kafka_client_kwargs(settings), acks="all",
                                enable_idempotence=True, linger_ms=5,
                                max_batch_size=256 * 1024)
    await producer.start()
    name = settings.topic(topics.TRANSACTIONS)
    try:
        t0 = time.monotonic()
        pending = []
        for i, msg in enumerate(lines):
            if rate:
                ahead = i / rate - (time.monotonic() - t0)
                if ahead > 0:
                    await asyncio.sleep(ahead)
            pending.append(await producer.send(name, value=msg, key=card_key(msg)))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return len(lines)


async def replay(settings: Settings, lines: Sequence[bytes], rate: float | None) -> int:
    report = await replay_messages(settings, lines, rate=rate)
    if report.errors:
        raise SystemExit(f"replay: {report.errors} errors")
    return report.sent


def measure(how: Replay, base: Settings, lines: Sequence[bytes], rate: float | None
            ) -> tuple[float, float]:
    """(messages/s, µs of this process's CPU per message) for one run on fresh topics."""
    settings = base.replace(topic_prefix=f"bench{uuid.uuid4().hex[:6]}.")
    asyncio.run(ensure_topics(settings))
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        sent = asyncio.run(how(settings, lines, rate))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        asyncio.run(drop_topics(settings))
    return sent / wall, cpu / sent * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=3_000.0,
                        help="messages/s of the paced runs (20 s of messages at most)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    base = load_settings()
    base = base.replace(kafka_bootstrap=base.effective_kafka_bootstrap)
    lines = lines_of(make_log(cards=max(500, args.messages // 20), txns=args.messages, seed=3))
    paced = lines[: int(args.rate * 20)]
    ratios: dict[str, list[float]] = {"unpaced msg/s": [], "unpaced cpu/msg": [],
                                      "paced cpu/msg": []}
    for r in range(args.rounds):
        order = [("send loop", send_loop), ("replay", replay)]
        if r % 2:
            order.reverse()  # alternate which goes first
        got = {}
        for name, how in order:
            got[name] = (measure(how, base, lines, None), measure(how, base, paced, args.rate))
        for name, ((rate, cpu), (prate, pcpu)) in got.items():
            print(f"round {r}: {name:9}  unpaced {rate:9,.0f} msg/s {cpu:6.1f} µs CPU/msg   "
                  f"paced at {args.rate:,.0f}/s {prate:7,.0f} msg/s {pcpu:6.1f} µs CPU/msg")
        (b_rate, b_cpu), (_, b_pcpu) = got["send loop"]
        (n_rate, n_cpu), (_, n_pcpu) = got["replay"]
        ratios["unpaced msg/s"].append(n_rate / b_rate)
        ratios["unpaced cpu/msg"].append(n_cpu / b_cpu)
        ratios["paced cpu/msg"].append(n_pcpu / b_pcpu)
    print("replay / send loop (median over rounds): " + ", ".join(
        f"{k} {statistics.median(v):.2f}x" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
