"""Live-load A/B: two or more variants of the worker's environment at one fixed offered rate.

    .venv/bin/python -m benchmarks.live_ab FRAUDSTREAM_STORE=rocksdb FRAUDSTREAM_STORE=memory
    .venv/bin/python -m benchmarks.live_ab A=0 A=1 --rate 16000 --seconds 25 --rounds 2

Each argument is one variant: `NAME=VALUE` assignments (several joined by spaces in one
argument) that the worker starts under; a name that is a setting (`fraudstream settings`) is
loaded as one, any other is passed to the worker's environment as is (an experiment's own hook).
The variants alternate on one broker, in reverse order every other round (order
effects cancel over an even number of rounds), after one uncounted warm-up step; each step as in
benchmarks/live_load.py: fresh topics, a fresh worker that has joined before its input starts,
`--seconds` of paced input at `--rate`. Per step it prints steady p50/p99, cold p99, the worker's
CPU per event, its mean batch, the cores the host stole, and the worker's cores by thread (main
loop, RocksDB's background threads, the rest: Faust's consumer thread above all); then each
variant's medians. On this shared host single steps swing with the hour: only the variants'
figures side by side, same run, say anything.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from unittest import mock

import click

from app.harness.pipeline import lines_of, make_log
from app.settings import Settings, load_settings
from benchmarks.live_load import Step, run_step
from benchmarks.pipeline_bench import bench_stack


def parse_variant(text: str) -> dict[str, str]:
    """`NAME=VALUE [NAME=VALUE ...]` as a mapping; a part without `=` is an error."""
    out: dict[str, str] = {}
    for part in text.split():
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{part!r} is not NAME=VALUE", param_hint="VARIANTS")
        out[name] = value
    return out


def variant_settings(base: Settings, assignments: dict[str, str]) -> Settings:
    """`base` with the assignments that name settings applied (the stack's addresses kept)."""
    loaded = load_settings({**os.environ, **assignments})
    return loaded.replace(kafka_bootstrap=base.kafka_bootstrap, redis_url=base.redis_url)


def row(label: str, step: Step) -> str:
    threads = " ".join(f"{group} {cores:.2f}" for group, cores in sorted(step.threads.items()))
    return (f"{label:<40s} {step.steady_p50:6.1f} {step.steady_p99:7.1f} {step.cold_p99:8.1f} "
            f"{step.cpu_us:6.1f} {step.mean_batch:6.1f} {step.stolen:6.3f}  {threads}")


def median_step(steps: list[Step]) -> Step:
    """The median of each figure `row` prints, over `steps` of one variant."""
    figures = ("steady_p50", "steady_p99", "cold_p99", "cpu_us", "mean_batch", "stolen")
    return dataclasses.replace(
        steps[0], **{f: statistics.median(getattr(s, f) for s in steps) for f in figures},
        threads={g: statistics.median(s.threads.get(g, 0.0) for s in steps)
                 for g in steps[0].threads})


@click.command()
@click.argument("variants", nargs=-1, required=True)
@click.option("--rate", type=float, default=13_500, show_default=True, help="Offered ev/s.")
@click.option("--seconds", type=float, default=25, show_default=True, help="Input per step.")
@click.option("--rounds", type=int, default=4, show_default=True,
              help="Steps of each variant (alternating).")
@click.option("--cards", type=int, default=10_000, show_default=True,
              help="Distinct cards in the generated log.")
@click.option("--warmup/--no-warmup", default=True, show_default=True,
              help="One step of the first variant before the rounds, not counted (a broker "
                   "started minutes before runs its first steps slow).")
def main(variants: tuple[str, ...], rate: float, seconds: float, rounds: int,
         cards: int, warmup: bool) -> None:
    if len(variants) < 2:
        raise click.UsageError("give at least two variants to compare")
    parsed = [(text, parse_variant(text)) for text in variants]
    base, _ = bench_stack()
    lines = lines_of(make_log(cards=cards, txns=int(rate * seconds * 1.05), seed=5))
    results: dict[str, list[Step]] = defaultdict(list)
    print(f"{'variant':<40s} {'p50':>6s} {'p99':>7s} {'cold p99':>8s} {'µs/ev':>6s} "
          f"{'batch':>6s} {'stolen':>6s}  cores by thread", flush=True)
    with tempfile.TemporaryDirectory() as tmp:

        def measure(assignments: dict[str, str]) -> Step:
            with mock.patch.dict(os.environ, assignments):  # the worker inherits it
                return run_step(variant_settings(base, assignments), lines, rate, seconds,
                                Path(tmp))

        if warmup:
            print(row(f"warm-up: {parsed[0][0]}", measure(parsed[0][1])), flush=True)
        for n in range(rounds):
            for text, assignments in (parsed if n % 2 == 0 else parsed[::-1]):
                step = measure(assignments)
                results[text].append(step)
                print(row(f"{n + 1}: {text}", step), flush=True)
    print(f"medians of {rounds} at {rate:,.0f} ev/s:")
    for text, _ in parsed:
        print(row(text, median_step(results[text])), flush=True)

if __name__ == "__main__":
    main()
