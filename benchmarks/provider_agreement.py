"""CUDA against CPU on the same real feature vectors: score differences and decisions that flip.

    python benchmarks/provider_agreement.py [--device cuda] [--rows 50000] [--batch 256]

Loads every model version on CPU (the oracle's provider) and on --device, scores the same real
feature vectors (the offline evaluator over a generated log) in --batch micro-batches, and
prints the provider each session really got, the largest absolute and ulp difference, how many
decisions (freeze / alert / nothing) differ, and how many of those lie outside the oracle's
boundary band (policy.BOUNDARY_EPS): that last figure must be 0, else the oracle's boundary
flags would not cover what a GPU worker can decide differently. Exits 1 when it is not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scorer_bench import real_vectors  # same folder: python puts it on sys.path

from app.scoring.policy import decide, near_threshold
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import features_matrix

#: Ulps are counted where scores reach this: below it, tiny absolute differences between tiny
#: scores are astronomically many ulps and say nothing about decisions.
ULP_FLOOR = 1e-3


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place (scores are sigmoid outputs, all ≥ 0)."""
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--device", choices=["auto", "cuda"], default="cuda")
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()

    matrix = features_matrix(real_vectors(args.rows))
    cpu_registry = ModelRegistry(args.model_dir, device="cpu")
    dev_registry = ModelRegistry(args.model_dir, device=args.device)
    outside_total = 0
    for version in cpu_registry.versions():
        cpu, dev = cpu_registry.load(version), dev_registry.load(version)
        chunks = range(0, len(matrix), args.batch)
        a = np.concatenate([cpu.scorer.score(matrix[i:i + args.batch]) for i in chunks])
        b = np.concatenate([dev.scorer.score(matrix[i:i + args.batch]) for i in chunks])
        flips = [i for i in range(len(a)) if decide(float(a[i]), cpu.thresholds)
                 != decide(float(b[i]), cpu.thresholds)]
        outside = [i for i in flips if not near_threshold(float(a[i]), cpu.thresholds)]
        outside_total += len(outside)
        ulps = _ulps(a, b)
        counted = ulps[np.maximum(a, b) >= ULP_FLOOR]
        print(f"{version}: {cpu.scorer.active_provider} vs {dev.scorer.active_provider}, "
              f"{len(a)} rows: identical {int((ulps == 0).sum())}, max |diff| "
              f"{float(np.abs(a - b).max()):.3g}, max ulps (scores >= {ULP_FLOOR:g}) "
              f"{int(counted.max(initial=0))}, decisions differing {len(flips)}, "
              f"outside the boundary band {len(outside)}")
    return 1 if outside_total else 0


if __name__ == "__main__":
    sys.exit(main())
