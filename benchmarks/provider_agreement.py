"""Every scorer a worker can run against the CPU oracle, at every batch size: decisions that flip.

    python -m benchmarks.provider_agreement [--device cuda|auto] [--rows 50000]
        [--sizes 1,2,4,...,4096] [--vectors vectors.npy] [--no-graphs] [--json out.json]

Loads every model version, scores the same real feature vectors (the offline evaluator over a
generated log, or --vectors) once on the CPU session (the oracle's provider, batch-invariant) and
then with each variant at each batch size: `cuda` (session.run), `cuda-bound` (IO binding on
bucket buffers), `cuda-graph` (plus CUDA graphs) and `hybrid` (the worker's scorer, which picks
CPU or CUDA by batch size; with bucket sizes 1..4096 every shape either provider can run at is
covered, since a bound batch of n rows runs at the smallest bucket >= n). Without CUDA the
variants are `cpu-bound` and a hybrid of two CPU sessions: a self-check that must show no
difference at all. Per variant and size: rows bit-identical to the oracle, largest absolute and
ulp difference, decisions (freeze / alert / nothing) that differ, and how many of those lie
outside the oracle's boundary band (policy.BOUNDARY_EPS). That last figure must be 0, else the
oracle's boundary flags would not cover what a GPU worker can decide differently: exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from app.scoring.binding import BoundScorer
from app.scoring.hybrid import GpuOptions, HybridScorer, hybrid
from app.scoring.placement import cpu_only_ops
from app.scoring.policy import Thresholds, decide, near_threshold
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import OnnxScorer, Scorer
from benchmarks.scorer_bench import DEFAULT_SIZES, cuda_variants, load_matrix

#: Ulps are counted where scores reach this: below it, tiny absolute differences between tiny
#: scores are astronomically many ulps and say nothing about decisions.
ULP_FLOOR = 1e-3


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place (scores are sigmoid outputs, all ≥ 0)."""
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


def compare(oracle: np.ndarray, other: np.ndarray, thresholds: Thresholds) -> dict[str, float]:
    """How `other` differs from the oracle's scores, and which decisions it changes."""
    flips = [i for i in range(len(oracle)) if decide(float(oracle[i]), thresholds)
             != decide(float(other[i]), thresholds)]
    outside = [i for i in flips if not near_threshold(float(oracle[i]), thresholds)]
    ulps = _ulps(oracle, other)
    counted = ulps[np.maximum(oracle, other) >= ULP_FLOOR]
    return {"identical": int((ulps == 0).sum()), "max_abs": float(np.abs(oracle - other).max()),
            "max_ulps": int(counted.max(initial=0)), "flips": len(flips),
            "outside_band": len(outside)}


def variants_for(data: bytes, name: str, *, max_rows: int, graphs: bool,
                 device: str) -> tuple[dict[str, Scorer], str]:
    """The scorers to hold against the oracle, and what was found."""
    cuda, note = cuda_variants(data, max_rows=max_rows, graphs=graphs)
    if device == "cuda" and not cuda and not cpu_only_ops(data):
        raise SystemExit(f"--device cuda: {note}")  # a tree model scores on the CPU anywhere
    cpu = OnnxScorer(data, device="cpu")
    if cuda:
        bound = cuda.get("cuda-graph") or cuda["cuda-bound"]
        assert isinstance(bound, BoundScorer)
        cuda["hybrid"] = hybrid(cpu, bound, name=name, options=GpuOptions(
            max_rows=max_rows, cuda_graph=bound.cuda_graph))
        return cuda, note
    second = BoundScorer(OnnxScorer(data, device="cpu").session, device_type="cpu",
                         max_rows=max_rows)
    return {"cpu-bound": second,
            "hybrid": HybridScorer(cpu, second, min_batch=max(1, max_rows // 8), name=name)}, note


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--device", choices=["auto", "cuda"], default="cuda")
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--sizes", default=DEFAULT_SIZES)
    parser.add_argument("--vectors", type=Path, default=None, help="float32 [N, F] .npy file.")
    parser.add_argument("--no-graphs", action="store_true", help="Skip the cuda-graph variant.")
    parser.add_argument("--json", type=Path, default=None, help="Write the figures here too.")
    args = parser.parse_args()

    sizes = [int(s) for s in args.sizes.split(",")]
    matrix = load_matrix(args.vectors, args.rows)
    registry = ModelRegistry(args.model_dir, device="cpu")
    report: list[dict[str, object]] = []
    outside_total = 0
    for version in registry.versions():
        loaded = registry.load(version)
        data = (registry.path(version) / "model.onnx").read_bytes()
        oracle = loaded.scorer.score(matrix)
        variants, note = variants_for(data, version, max_rows=max(sizes),
                                      graphs=not args.no_graphs, device=args.device)
        hybrid_scorer = variants["hybrid"]
        print(f"{version}: oracle on {loaded.scorer.active_provider}, {len(matrix)} rows; {note}; "
              f"hybrid {hybrid_scorer.active_provider}")
        print(f"  {'variant':>10} {'batch':>5} {'identical':>9} {'max |diff|':>10} "
              f"{'max ulps':>8} {'flips':>5} {'outside':>7}")
        for name, scorer in variants.items():
            for size in sizes:
                scores = np.concatenate([scorer.score(matrix[i:i + size])
                                         for i in range(0, len(matrix), size)])
                row = compare(oracle, scores, loaded.thresholds)
                outside_total += int(row["outside_band"])
                report.append({"version": version, "variant": name, "batch": size, **row})
                print(f"  {name:>10} {size:>5} {row['identical']:>9} {row['max_abs']:>10.3g} "
                      f"{row['max_ulps']:>8} {row['flips']:>5} {row['outside_band']:>7}")
    print(f"decisions outside the boundary band, all variants and sizes: {outside_total}")
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": len(matrix), "results": report}, indent=1))
    return 1 if outside_total else 0


if __name__ == "__main__":
    sys.exit(main())
