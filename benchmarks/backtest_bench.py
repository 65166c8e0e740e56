"""Benchmark: `fraudstream backtest`'s work (features, scores, two policies decided and measured)
against the offline fold alone (`compute_features`, what `fraudstream features` does) on the
same log, in the same run; label reading is timed on its own.

    .venv/bin/fraudstream generate --cards 20000 --txns 1000000 --days 14 --out big.parquet
    .venv/bin/python benchmarks/backtest_bench.py --events big.parquet --labels big.labels.jsonl
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from app.features.offline import compute_features
from app.scoring.backtest import Rows, Truth, compare, evaluate
from app.scoring.lists import EMPTY
from app.scoring.oracle import decide_rows, score_table
from app.scoring.registry import ModelRegistry
from app.settings import load_settings
from app.transactions.labelfile import iter_label_rows
from app.transactions.labels import parse_label_row


def fold_only(events: Path, now_ms: int, lateness_ms: int) -> float:
    began = time.perf_counter()
    compute_features(events, allowed_lateness_ms=lateness_ms, now_ms=now_ms)
    return time.perf_counter() - began


def backtest(events: Path, truth: Truth, now_ms: int, lateness_ms: int, registry: ModelRegistry,
             stricter: float) -> tuple[float, dict[str, float]]:
    """Seconds of the whole computation, and of its phases."""
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    offline = compute_features(events, allowed_lateness_ms=lateness_ms, now_ms=now_ms,
                               extra=("merchant_id", "amount_minor"))
    t1 = time.perf_counter()
    model = registry.load(None)
    scores = score_table(model, offline)
    t2 = time.perf_counter()
    table = offline.table
    rows = Rows(*(table.column(n).to_pylist()
                  for n in ("txn_id", "card_id", "ts_ms", "amount_minor")), scores.tolist())
    fraud = rows.fraud_rows(truth)
    outcomes = []
    for policy in (model.thresholds, model.thresholds.override(freeze=stricter)):
        actions, _ = decide_rows(model, offline, scores, policy, lists=EMPTY, explain=False)
        outcomes.append(evaluate("p", policy, actions, rows, truth, fraud))
    compare(outcomes[0], outcomes[1], truth)
    t3 = time.perf_counter()
    phases.update(features=t1 - t0, scores=t2 - t1, decide_and_measure=t3 - t2)
    return t3 - t0, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--labels", type=Path, required=True)
    parser.add_argument("--stricter", type=float, default=0.97, help="candidate freeze threshold")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    settings = load_settings()
    now_ms = time.time_ns() // 1_000_000
    registry = ModelRegistry(settings.model_dir, device="cpu")
    began = time.perf_counter()
    truth = Truth.of(parse_label_row(row, now_ms=now_ms)
                     for _n, _raw, row in iter_label_rows(args.labels))
    labels_s = time.perf_counter() - began
    lateness = settings.allowed_lateness_ms
    print(f"labels read: {len(truth.txns) + len(truth.cards):,} in {labels_s:.1f}s")
    print(f"{'round':>5} {'fold s':>8} {'backtest s':>11} {'ratio':>6}  phases")
    for r in range(args.rounds):
        # alternate who goes first (page cache, CPU frequency)
        if r % 2 == 0:
            base = fold_only(args.events, now_ms, lateness)
            total, phases = backtest(args.events, truth, now_ms, lateness, registry, args.stricter)
        else:
            total, phases = backtest(args.events, truth, now_ms, lateness, registry, args.stricter)
            base = fold_only(args.events, now_ms, lateness)
        shown = " ".join(f"{k}={v:.1f}s" for k, v in phases.items())
        print(f"{r:>5} {base:>8.2f} {total:>11.2f} {total / base:>6.2f}  {shown}")


if __name__ == "__main__":
    main()
