"""Catch-up scoring: a million rows through the worker's scorer against the CPU session, same run.

    .venv/bin/python -m benchmarks.catch_up_bench [--rows 1000000] [--batches 512,4096]
        [--version mlp-...] [--device auto|cuda] [--vectors vectors.npy] [--json out.json]

After an outage a worker scores its backlog in the largest batches it takes (FRAUDSTREAM_MAX_BATCH,
512 by default; more when raised). This scores --rows real feature vectors (cycled) in batches of
each size through `build_scorer` — the worker's scorer: the hybrid when onnxruntime loads CUDA
and the model runs on it whole, else the CPU session — and through the single-threaded CPU
session (the oracle's), in alternating blocks of 16 batches so that machine noise hits both
alike. Printed per batch size: rows/s of each, their ratio, the share of the worker's rows scored
on CUDA, and the largest |worker − CPU| score (0 when it ran on the CPU). Without CUDA, or with a
tree model (no CUDA kernel in onnxruntime), both sides are CPU sessions and the ratio is ~1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from app.scoring.hybrid import GpuOptions, HybridScorer, build_scorer
from app.scoring.metrics import ProviderTally
from app.scoring.scorer import CUDA, OnnxScorer, Scorer
from benchmarks.scorer_bench import load_matrix, model_bytes

BLOCK = 16


def run_block(scorer: Scorer, batches: list[np.ndarray], start: int, count: int,
              out: list[np.ndarray] | None) -> float:
    """Seconds to score `count` batches from `start` (cycling); their scores kept in `out`."""
    t0 = time.perf_counter()
    for i in range(start, start + count):
        scores = scorer.score(batches[i % len(batches)])
        if out is not None:
            out.append(scores)
    return time.perf_counter() - t0


def catch_up(worker: Scorer, cpu: Scorer, batches: list[np.ndarray], calls: int) -> dict[str, float]:
    """Both scorers over the same `calls` batches, alternating blocks; rows/s and max |diff|."""
    worker_s = cpu_s = 0.0
    worker_out: list[np.ndarray] = []
    cpu_out: list[np.ndarray] = []
    done = 0
    while done < calls:
        count = min(BLOCK, calls - done)
        keep = done < len(batches)  # the first pass over the vectors is compared
        worker_s += run_block(worker, batches, done, count, worker_out if keep else None)
        cpu_s += run_block(cpu, batches, done, count, cpu_out if keep else None)
        done += count
    rows = sum(batches[i % len(batches)].shape[0] for i in range(calls))
    diff = max(float(np.max(np.abs(w - c))) for w, c in zip(worker_out, cpu_out, strict=True))
    return {"rows": rows, "worker_rows_per_s": rows / worker_s, "cpu_rows_per_s": rows / cpu_s,
            "worker_over_cpu": cpu_s / worker_s, "max_abs_diff": diff}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--version", default=None, help="Model version [default: DEFAULT].")
    parser.add_argument("--device", choices=["auto", "cuda"], default="auto")
    parser.add_argument("--rows", type=int, default=1_000_000, help="Rows per batch size.")
    parser.add_argument("--batches", default="512,4096", help="Catch-up batch sizes.")
    parser.add_argument("--vectors", type=Path, default=None, help="float32 [N, F] .npy file.")
    parser.add_argument("--vector-rows", type=int, default=20_000,
                        help="Real feature vectors to generate (and cycle) without --vectors.")
    parser.add_argument("--json", type=Path, default=None, help="Write the figures here too.")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.batches.split(",")]
    name, data = model_bytes(args.model_dir, args.version)
    tally = ProviderTally()
    try:
        worker = build_scorer(data, device=args.device, name=name, metrics=tally,
                              gpu=GpuOptions(max_rows=max(sizes)))
    except RuntimeError as exc:
        print(f"--device {args.device}: {exc}", file=sys.stderr)
        return 2
    cpu = OnnxScorer(data, device="cpu", name=name)
    matrix = load_matrix(args.vectors, args.vector_rows)
    crossing = (worker.min_batch if isinstance(worker, HybridScorer) else None)
    print(f"model {name}: worker scorer {worker.active_provider}; CPU session "
          f"{cpu.active_provider}; {len(matrix):,} real vectors cycled; {args.rows:,} rows a size")
    print(f"{'batch':>6} {'worker rows/s':>15} {'cpu rows/s':>13} {'worker/cpu':>10} "
          f"{'on CUDA':>8} {'max |diff|':>11}")
    results = []
    for size in sizes:
        batches = [np.ascontiguousarray(matrix[i:i + size])
                   for i in range(0, len(matrix) - size + 1, size)] or [matrix[:size]]
        before = sum(tally.rows.values()), tally.rows[CUDA]
        figures = catch_up(worker, cpu, batches, calls=-(-args.rows // size))
        rows = sum(tally.rows.values()) - before[0]
        on_cuda = (tally.rows[CUDA] - before[1]) / rows if rows else 0.0
        results.append({"batch": size, **figures, "cuda_share": on_cuda})
        print(f"{size:>6} {figures['worker_rows_per_s']:>15,.0f} {figures['cpu_rows_per_s']:>13,.0f}"
              f" {figures['worker_over_cpu']:>10.2f} {on_cuda:>8.1%} {figures['max_abs_diff']:>11.2e}")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "model": name, "worker": worker.active_provider, "gpu_min_batch": crossing,
            "sizes": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
