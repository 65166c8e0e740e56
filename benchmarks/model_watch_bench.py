"""What drift counting and a shadow model cost the worker: in-process per batch, and live.

    .venv/bin/python -m benchmarks.model_watch_bench [--sizes 1,10,32,128,512] [--rounds 5]
    .venv/bin/python -m benchmarks.model_watch_bench --live [--rate 1162] [--seconds 20] [--pairs 2]

In-process (always): a generated log's messages go through the worker's own batch path
(`TransactionPipeline.process` → `ScoringStage.run`) in batches of each size, three ways in
turn each round: drift off and no shadow (the base), drift on, and a shadow model set (the same
graph in a second session: one more model call per batch and a features.shadow row per event);
and `DriftStage.observe` and `ShadowStage.run` alone on the same scored batches (what each
adds, timed directly: precise where the whole path's noise on a shared machine is larger than
the effect). Fastest round of each kept. Printed per batch size: µs per event of the base path,
of counting and of shadow scoring (each with its share of the base path), and the whole paths
with drift and with a shadow as ratios to the base. The worker also spends CPU in Kafka I/O and Faust
(591 µs/event at the SLO rate in docs/benchmarks/live-load.md against ~150 here), so the
share of its whole CPU is smaller still.
Live (--live): pairs of benchmarks/live_load.py steps at `--rate` ev/s (default: the SLO rate
of docs/benchmarks/live-load.md), a fresh worker each with FRAUDSTREAM_DRIFT=false then =true;
printed: worker CPU µs per event of each and the median ratio (on/off), same run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import click
import numpy as np

from app.harness.pipeline import lines_of, make_log
from app.kafka.records import SourceMessage
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import features_matrix
from app.settings import load_settings
from app.stream.engine.pipeline import DictCards, TransactionPipeline
from app.stream.engine.scoring import ScoringStage


def _batches(lines: list[bytes], size: int) -> list[list[SourceMessage]]:
    msgs = [SourceMessage("transactions", 0, i, None, line) for i, line in enumerate(lines)]
    return [msgs[i:i + size] for i in range(0, len(msgs), size)]


def _path(model, settings, lines, size, now, *, drift: bool, shadow=None) -> float:  # noqa: ANN001
    """Seconds for the whole log through pipeline.process + ScoringStage.run in `size` batches."""
    pipeline = TransactionPipeline(DictCards(), clock_ms=lambda: now, allowed_lateness_ms=300_000,
                                   max_message_bytes=8192)
    stage = ScoringStage(model, settings.replace(drift=drift), lambda: now)
    if shadow is not None:
        stage.shadow.offer(shadow)
    t0 = time.perf_counter()
    for batch in _batches(lines, size):
        stage.run(pipeline.process(batch, snapshot=False).scored)
    if stage.drift.monitor is not None:
        stage.drift.monitor.flush()  # what is held is counted too
    return time.perf_counter() - t0


def in_process(sizes: list[int], rounds: int, events: int) -> None:
    settings = load_settings()
    registry = ModelRegistry(settings.model_dir, device="cpu")
    model = registry.load()
    # the shadow: the same graph under another session (what a candidate costs: one more call)
    shadow = ModelRegistry(settings.model_dir, device="cpu").load()
    lines = lines_of(make_log(cards=max(events // 20, 10), txns=events, days=3, seed=3))
    now = int(time.time() * 1000)
    print(f"model {model.version}, {len(lines):,} events; µs per event, fastest of {rounds} "
          f"rounds (variants alternate within a round)")
    print(f"{'batch':>6} {'path':>8} {'counting':>9} {'share':>7} {'shadow':>8} {'share':>7} "
          f"{'path+drift':>11} {'path+shadow':>12}")
    for size in sizes:
        best = {"base": float("inf"), "drift": float("inf"), "shadow": float("inf"),
                "count": float("inf"), "shadow_alone": float("inf")}
        for _ in range(rounds):
            best["base"] = min(best["base"], _path(model, settings, lines, size, now, drift=False))
            best["drift"] = min(best["drift"], _path(model, settings, lines, size, now, drift=True))
            best["shadow"] = min(best["shadow"], _path(model, settings, lines, size, now,
                                                       drift=False, shadow=shadow))
            # drift counting alone, on the same scored batches (the stage's own inputs)
            pipeline = TransactionPipeline(DictCards(), clock_ms=lambda: now,
                                           allowed_lateness_ms=300_000, max_message_bytes=8192)
            counter = ScoringStage(model, settings.replace(drift=True), lambda: now).drift
            inputs = []
            for batch in _batches(lines, size):
                scored = pipeline.process(batch, snapshot=False).scored
                matrix = features_matrix([s.features for s in scored])
                inputs.append((scored, matrix, model.scorer.score(matrix)))
            t1 = time.perf_counter()
            for scored, matrix, scores in inputs:
                counter.observe(scored, matrix, scores)
            assert counter.monitor is not None
            counter.monitor.flush()
            best["count"] = min(best["count"], time.perf_counter() - t1)
            # shadow scoring alone on the same batches: its model call and its rows
            stage = ScoringStage(model, settings.replace(drift=False), lambda: now)
            stage.shadow.offer(shadow)
            stage.shadow.run([], inputs[0][1][:0], inputs[0][2][:0], active_version="a",
                             active=stage.thresholds)  # the offer applies between batches
            t2 = time.perf_counter()
            for scored, matrix, scores in inputs:
                stage.shadow.run(scored, matrix, scores, active_version=model.version,
                                 active=stage.thresholds)
            best["shadow_alone"] = min(best["shadow_alone"], time.perf_counter() - t2)
        per = 1e6 / len(lines)
        base = best["base"]
        print(f"{size:>6} {base * per:>8.1f} {best['count'] * per:>9.2f} "
              f"{best['count'] / base:>7.2%} {best['shadow_alone'] * per:>8.2f} "
              f"{best['shadow_alone'] / base:>7.2%} {best['drift'] / base:>10.3f}x "
              f"{best['shadow'] / base:>11.3f}x")


def live(rate: float, seconds: float, pairs: int) -> None:
    from benchmarks.live_load import run_step  # noqa: PLC0415 - only for --live

    base = load_settings()
    base = base.replace(kafka_bootstrap=base.effective_kafka_bootstrap)
    lines = lines_of(make_log(cards=5000, txns=int(rate * seconds) + 1000, days=2, seed=9))
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(pairs):
            off = run_step(base.replace(drift=False), lines, rate, seconds, Path(tmp))
            on = run_step(base.replace(drift=True), lines, rate, seconds, Path(tmp))
            ratios.append(on.cpu_us / off.cpu_us)
            print(f"pair {i + 1}: {rate:,.0f} ev/s, worker CPU µs/event drift off "
                  f"{off.cpu_us:.0f} (p99 {off.steady_p99:.0f} ms, batch {off.mean_batch:.1f}), "
                  f"on {on.cpu_us:.0f} (p99 {on.steady_p99:.0f} ms, batch {on.mean_batch:.1f}): "
                  f"on/off {ratios[-1]:.3f}")
    print(f"median on/off worker CPU per event: {statistics.median(ratios):.3f} "
          f"({len(ratios)} pairs)")


@click.command()
@click.option("--sizes", default="1,10,32,128,512", show_default=True)
@click.option("--rounds", type=int, default=5, show_default=True)
@click.option("--events", type=int, default=20_000, show_default=True)
@click.option("--live", "run_live", is_flag=True, help="Also the live pairs (needs the stack).")
@click.option("--rate", type=float, default=1162.0, show_default=True)
@click.option("--seconds", type=float, default=20.0, show_default=True)
@click.option("--pairs", type=int, default=2, show_default=True)
def main(sizes: str, rounds: int, events: int, run_live: bool, rate: float, seconds: float,
         pairs: int) -> None:
    np.seterr(all="ignore")
    in_process([int(s) for s in sizes.split(",")], rounds, events)
    if run_live:
        live(rate, seconds, pairs)


if __name__ == "__main__":
    main()
