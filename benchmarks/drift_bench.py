"""What drift counting costs the worker: in-process per batch, and live at the SLO rate.

    .venv/bin/python benchmarks/drift_bench.py [--sizes 1,10,32,128,512] [--rounds 5]
    .venv/bin/python benchmarks/drift_bench.py --live [--rate 1162] [--seconds 20] [--pairs 2]

In-process (always): a generated log's messages go through the worker's own batch path
(`TransactionPipeline.process` → `ScoringStage.run`, drift off) in batches of each size, and
separately through `DriftStage.observe` (the drift counting the stage adds) on the same scored
batches; rounds alternate, the fastest round of each kept. Printed per batch size: µs per event
of the batch path, of drift counting, and their ratio (the share drift adds to that path; the
worker also spends CPU in Kafka I/O and Faust, so the share of its whole CPU is smaller).
Live (--live): pairs of benchmarks/live_load.py steps at `--rate` ev/s (default: the SLO rate
of docs/benchmarks/live-load.md), a fresh worker each with FRAUDSTREAM_DRIFT=false then =true;
printed: worker CPU µs per event of each and the median ratio (on/off), same run.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.scoring.registry import ModelRegistry  # noqa: E402
from app.scoring.scorer import features_matrix  # noqa: E402
from app.settings import load_settings  # noqa: E402
from app.stream.pipeline import TransactionPipeline  # noqa: E402
from app.stream.records import SourceMessage  # noqa: E402
from app.stream.scoring import ScoringStage  # noqa: E402
from tests.support.pipeline import lines_of, make_log  # noqa: E402


class _Cards:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def load(self, card_id: str) -> bytes | None:
        return self.data.get(card_id)

    def save(self, card_id: str, data: bytes, partition: int) -> None:
        self.data[card_id] = data


def _batches(lines: list[bytes], size: int) -> list[list[SourceMessage]]:
    msgs = [SourceMessage("transactions", 0, i, None, line) for i, line in enumerate(lines)]
    return [msgs[i:i + size] for i in range(0, len(msgs), size)]


def in_process(sizes: list[int], rounds: int, events: int) -> None:
    settings = load_settings()
    model = ModelRegistry(settings.model_dir, device="cpu").load()
    lines = lines_of(make_log(cards=max(events // 20, 10), txns=events, days=3, seed=3))
    now = int(time.time() * 1000)
    print(f"model {model.version}, {len(lines):,} events; µs per event (fastest of {rounds} "
          f"rounds)")
    print(f"{'batch':>6} {'batch path':>11} {'drift':>8} {'drift / path':>13}")
    for size in sizes:
        best_path, best_drift = float("inf"), float("inf")
        for _ in range(rounds):
            pipeline = TransactionPipeline(_Cards(), clock_ms=lambda: now,
                                           allowed_lateness_ms=300_000, max_message_bytes=8192)
            stage = ScoringStage(model, settings.replace(drift=False), lambda: now)
            drift = ScoringStage(model, settings.replace(drift=True), lambda: now).drift
            scored_batches = []
            t0 = time.perf_counter()
            for batch in _batches(lines, size):
                outcome = pipeline.process(batch, snapshot=False)
                stage.run(outcome.scored)
                scored_batches.append(outcome.scored)
            path = time.perf_counter() - t0
            # the inputs drift counting gets in the stage: the batch's matrix and scores
            inputs = []
            for scored in scored_batches:
                matrix = features_matrix([s.features for s in scored])
                inputs.append((scored, matrix, model.scorer.score(matrix)))
            t1 = time.perf_counter()
            for scored, matrix, scores in inputs:
                drift.observe(scored, matrix, scores)
            assert drift.monitor is not None
            drift.monitor.flush()  # what is held is counted too
            counted = time.perf_counter() - t1
            best_path, best_drift = min(best_path, path), min(best_drift, counted)
        per = 1e6 / len(lines)
        print(f"{size:>6} {best_path * per:>11.1f} {best_drift * per:>8.2f} "
              f"{best_drift / best_path:>12.2%}")


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
