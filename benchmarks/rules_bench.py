"""What rules cost: evaluation per event with 10, 100 and 1,000 active rules, and a worker's
backlog rate with 100 rules against none, in one run.

    .venv/bin/python -m benchmarks.rules_bench                      # both parts
    .venv/bin/python -m benchmarks.rules_bench --no-live            # evaluation only

1. Evaluation: `RuleSet.evaluate` (the worker's call, once per batch) over batches of scored rows
   from a generated log's offline fold, at the worker's batch sizes (37 and 512 rows), for rule
   sets drawn from templates a fraud team writes (amount and merchant fraud share, score and
   velocity, country lists, hour of day, list membership); µs per event, the median of
   `--repeat` timed passes, beside the same pass with no rules.
2. Backlog: a worker (no dispatch) drains the same pre-filled log on fresh topics, once with 100
   active rules on the control topic and once with none, alternating `--pairs` times; the rate
   is served rows over the span of their broker append times (benchmarks/pipeline_bench.py's
   measure). The ratio is rules / none, pair by pair.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import click
import numpy as np

from app.features.declaration import FEATURE_NAMES
from app.rules.rule import Rule
from app.rules.ruleset import RuleSet

_COUNTRIES = ("US", "GB", "DE", "FR", "BR", "IN", "NG", "RU", "CN", "JP")


def draw_rules(n: int, seed: int = 0) -> list[Rule]:
    """`n` active rules from templates; thresholds high enough that few rows hold."""
    rng = random.Random(seed)
    templates = [
        lambda: f"amount_minor > {rng.randint(200_000, 2_000_000)} and "
                f"merchant_fraud_share_7d > {rng.uniform(0.2, 0.9):.2f}",
        lambda: f"score > {rng.uniform(0.3, 0.9):.3f} and count_1h >= {rng.randint(3, 9)}",
        lambda: f"country in {tuple(rng.sample(_COUNTRIES, 3))!r} and "
                f"amount_minor > {rng.randint(100_000, 900_000)}",
        lambda: f"between(mean_24h, {rng.randint(1_000, 5_000)}, {rng.randint(50_000, 90_000)})"
                f" and hour < {rng.randint(1, 5)} and distinct_countries_24h >= 3",
        lambda: f"listed('block') or (amount_to_mean_30d > {rng.uniform(5, 20):.1f} and "
                f"count_30d >= {rng.randint(5, 40)})",
    ]
    actions = ("freeze_card", "alert_customer", "review", "allow")
    return [Rule(id=f"r{i:04d}", version=1, expression=rng.choice(templates)(),
                 action=actions[i % 4], mode="active", owner="bench", reason="bench",  # type: ignore[arg-type]
                 order=i, author="bench", at_ms=0) for i in range(n)]


class _Txn:
    __slots__ = ("amount_minor", "card_id", "country", "merchant_id", "ts_ms", "txn_id")

    def __init__(self, row: dict) -> None:
        for name in self.__slots__:
            setattr(self, name, row.get(name))


class _Row:
    __slots__ = ("features", "txn")

    def __init__(self, txn: _Txn, features: tuple) -> None:
        self.txn = txn
        self.features = features


def scored_rows(n: int) -> tuple[list[_Row], np.ndarray]:
    """`n` rows of a generated log's offline fold, as the worker hands them to the rules."""
    from app.datagen.config import GeneratorConfig
    from app.datagen.generator import generate_log
    from app.features.offline import compute_features

    log = generate_log(GeneratorConfig(cards=2_000, txns=n, seed=5))
    lines = [line for line, _ in log.iter_lines()]
    extra = ("merchant_id", "amount_minor", "country")
    table = compute_features(lines, allowed_lateness_ms=300_000, now_ms=2**62 // 4,
                             extra=extra).table
    cols = {name: table.column(name).to_pylist() for name in
            ("txn_id", "card_id", "ts_ms", *extra, *FEATURE_NAMES)}
    rows = []
    for i in range(table.num_rows):
        txn = _Txn({k: cols[k][i] for k in ("txn_id", "card_id", "ts_ms", *extra)})
        rows.append(_Row(txn, tuple(cols[f][i] for f in FEATURE_NAMES)))
    scores = np.random.default_rng(0).beta(0.5, 20, len(rows))
    return rows, scores


def evaluation(counts: list[int], batches: list[int], repeat: int) -> None:
    rows, scores = scored_rows(20_000)
    click.echo(f"rule evaluation over {len(rows):,} scored rows (µs per event, median of "
               f"{repeat}):")
    click.echo(f"  {'rules':>6} " + " ".join(f"{'batch ' + str(b):>12}" for b in batches)
               + "   rows decided")
    for n in [0, *counts]:
        rs = RuleSet.of(draw_rules(n))
        cells, decided = [], 0
        for b in batches:
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                for start in range(0, len(rows), b):
                    found = rs.evaluate(rows[start:start + b], scores[start:start + b])
                    if b == batches[0]:
                        decided += int((found.deciding >= 0).sum())
                times.append((time.perf_counter() - t0) / len(rows) * 1e6)
            cells.append(f"{statistics.median(times):>12.2f}")
        click.echo(f"  {n:>6} " + " ".join(cells) + f"   {decided // repeat:,}")


def backlog(txns: int, pairs: int, rules: int) -> None:
    from app.control.publisher import ControlPublisher
    from app.harness.pipeline import lines_of, make_log, replay
    from app.kafka.topics import drop_topics
    from benchmarks.pipeline_bench import bench_stack, fresh, measure_worker

    base, broker_pid = bench_stack()
    lines = lines_of(make_log(cards=20_000, txns=txns, seed=11))
    drawn = draw_rules(rules)

    async def publish(settings: object) -> None:
        async with ControlPublisher(settings) as publisher:  # type: ignore[arg-type]
            for r in drawn:
                await publisher.put_rule(r)

    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            rates = {}
            for side in (("none", "rules") if pair % 2 == 0 else ("rules", "none")):
                settings = fresh(base, uuid.uuid4().hex[:6])
                replay(settings, lines)
                if side == "rules":
                    asyncio.run(publish(settings))
                try:
                    got = measure_worker(settings, len(lines), Path(tmp), broker_pid)
                finally:
                    asyncio.run(drop_topics(settings))
                rates[side] = got.rate
                click.echo(f"  pair {pair + 1} {side:>5}: {got.rate:,.0f} ev/s, worker "
                           f"{got.cpu_us_per_event:.1f} µs/event")
            ratios.append(rates["rules"] / rates["none"])
    click.echo(f"backlog with {rules} active rules / without: "
               + ", ".join(f"{r:.3f}" for r in ratios)
               + f" (median {statistics.median(ratios):.3f})")


@click.command()
@click.option("--counts", default="10,100,1000", show_default=True)
@click.option("--batches", default="37,512", show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.option("--live/--no-live", default=True, show_default=True,
              help="Also the worker's backlog rate with 100 rules against none.")
@click.option("--txns", type=int, default=100_000, show_default=True)
@click.option("--pairs", type=int, default=2, show_default=True)
@click.option("--rules", "live_rules", type=int, default=100, show_default=True)
def main(counts: str, batches: str, repeat: int, live: bool, txns: int, pairs: int,
         live_rules: int) -> None:
    evaluation([int(x) for x in counts.split(",")], [int(x) for x in batches.split(",")],
               repeat)
    if live:
        backlog(txns, pairs, live_rules)


if __name__ == "__main__":
    main()
