"""Scorer throughput and stall per micro-batch size, as ratios against batch 1 in the same process.

    python benchmarks/scorer_bench.py [--model-dir models] [--seconds 2] [--device cpu]

Feature vectors are real ones: the offline evaluator over a small generated log. For each
batch size the loop scores consecutive batches for --seconds (and at most --max-calls calls),
timing every call of `score()` alone (the matrix prepared beforehand) and of
`features_matrix` + `score()` (what the worker pays per micro-batch). The longest single
`score()` call is the proxy for how long the event loop stalls on one batch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from app.datagen.config import GeneratorConfig
from app.datagen.generator import generate_log
from app.features.declaration import FEATURE_NAMES
from app.features.offline import compute_features
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import Scorer, features_matrix


def real_vectors(rows: int) -> list[tuple[int | float, ...]]:
    log = generate_log(GeneratorConfig(cards=max(rows // 40, 10), txns=rows, days=7, seed=11))
    offline = compute_features((line for line, _ in log.iter_lines()),
                               allowed_lateness_ms=300_000, now_ms=log.config.validation_now_ms)
    columns = [offline.table.column(n).to_pylist() for n in FEATURE_NAMES]
    return list(zip(*columns, strict=True))


def _measure(scorer: Scorer, vectors: list[tuple[int | float, ...]], size: int, seconds: float,
             max_calls: int) -> dict[str, float]:
    matrices = [features_matrix(vectors[i:i + size])
                for i in range(0, len(vectors) - size + 1, size)]
    score_s: list[float] = []
    convert_s: list[float] = []
    deadline = time.perf_counter() + seconds
    calls = 0
    while time.perf_counter() < deadline and calls < max_calls:
        i = calls % len(matrices)
        batch = vectors[i * size:(i + 1) * size]
        t0 = time.perf_counter()
        scorer.score(features_matrix(batch))
        t2 = time.perf_counter()
        scorer.score(matrices[i])
        t3 = time.perf_counter()
        convert_s.append(t2 - t0)
        score_s.append(t3 - t2)
        calls += 1
    events = calls * size
    return {
        "calls": calls,
        "score_eps": events / sum(score_s),
        "full_eps": events / sum(convert_s),
        "p50_us": statistics.median(score_s) * 1e6,
        "p99_us": float(np.percentile(score_s, 99)) * 1e6,
        "max_us": max(score_s) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--version", default=None, help="Model version [default: DEFAULT].")
    parser.add_argument("--device", choices=["cpu", "auto", "cuda"], default="cpu")
    parser.add_argument("--sizes", default="1,8,64,256")
    parser.add_argument("--seconds", type=float, default=2.0, help="Per batch size.")
    parser.add_argument("--max-calls", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=20_000, help="Feature vectors to cycle.")
    args = parser.parse_args()

    loaded = ModelRegistry(args.model_dir, device=args.device).load(args.version)
    vectors = real_vectors(args.rows)
    sizes = [int(s) for s in args.sizes.split(",")]
    loaded.scorer.score(features_matrix(vectors[:max(sizes)]))  # warm-up
    print(f"model {loaded.version} on {loaded.scorer.active_provider}, "
          f"{len(vectors)} real feature vectors, {args.seconds:.1f}s per size")
    print(f"{'batch':>5} {'calls':>8} {'score ev/s':>12} {'x b1':>6} {'+convert ev/s':>14} "
          f"{'x b1':>6} {'p50 us':>8} {'p99 us':>8} {'max us':>8}")
    base: dict[str, float] | None = None
    for size in sizes:
        r = _measure(loaded.scorer, vectors, size, args.seconds, args.max_calls)
        base = base or r
        print(f"{size:>5} {r['calls']:>8.0f} {r['score_eps']:>12,.0f} "
              f"{r['score_eps'] / base['score_eps']:>6.1f} {r['full_eps']:>14,.0f} "
              f"{r['full_eps'] / base['full_eps']:>6.1f} {r['p50_us']:>8.1f} "
              f"{r['p99_us']:>8.1f} {r['max_us']:>8.1f}")


if __name__ == "__main__":
    main()
