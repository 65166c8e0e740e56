"""Scorer rows/s per batch size: CPU, CUDA (plain, IO-bound, CUDA graphs) and hybrid, same run.

    python benchmarks/scorer_bench.py [--device auto|cpu|cuda] [--sizes 1,2,4,...,4096]
        [--seconds 1] [--json out.json] [--vectors vectors.npy] [--min-batch N]
    python benchmarks/scorer_bench.py --algorithms mlp,lgbm [--sizes 1,64,4096]
        [--gbt-trees 300] [--gbt-leaves 31] [--json out.json]

Each variant scores the same real feature vectors (the offline evaluator over a generated log,
or --vectors, an .npy float32 [N, F] saved by --save-vectors) already converted to float32:
`score()` alone. For each batch size the variants take turns (--rounds rounds of equal-length
blocks, the fastest block kept) so machine noise hits all of them alike. Variants:

- cpu: one CPU session, one thread (the oracle's scorer; the default without CUDA);
- cuda: `session.run` on the CUDA provider (a plain CUDA session, no IO binding);
- cuda-bound: IO binding on preallocated per-bucket device buffers (binding.BoundScorer);
- cuda-graph: the same with one CUDA graph per bucket (onnxruntime enable_cuda_graph);
- hybrid: the worker's scorer (hybrid.HybridScorer over `cpu` and the best bound CUDA variant,
  crossover calibrated at start-up as in the worker, or --min-batch); without CUDA it is `cpu`.

Printed: rows/s per variant, ratios against cpu, hybrid / best other variant (>= 1 means the
hybrid is as fast as the better provider at that size, within noise), the per-call fixed cost
(time of a call at batch 1, and the intercept of a least-squares line through all sizes) and the
cost per row, and the conversion from Python feature tuples (features_matrix, against the
nested np.asarray it replaced).
--algorithms trains one model per algorithm (the `fraudstream model train` defaults; the trees'
size from --gbt-trees/--gbt-leaves) on one generated, labelled log and times their CPU sessions
side by side, interleaved as above, on that log's evaluation rows: µs per call and per row at
each batch size and the ratio of each algorithm to the first one (CPU only, one thread: the
oracle's scorer and the worker's without CUDA; the trees have no CUDA kernel).
Needs numpy, onnxruntime and the app package (not faust, aiokafka or redis); --algorithms
needs the `train` extra too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from app.features.declaration import FEATURE_NAMES
from app.scoring.binding import BoundScorer, bucket_sizes
from app.scoring.hybrid import NEVER, GpuOptions, HybridScorer, hybrid
from app.scoring.metrics import ProviderTally
from app.scoring.scorer import CUDA, OnnxScorer, Scorer, features_matrix

DEFAULT_SIZES = ",".join(str(s) for s in bucket_sizes(4096))
COMPARE_SIZES = "1,64,4096"
Vector = tuple[int | float, ...]


def real_vectors(rows: int) -> list[Vector]:
    """Feature vectors of a generated log, as the offline evaluator computes them."""
    from app.datagen.config import GeneratorConfig
    from app.datagen.generator import generate_log
    from app.features.offline import compute_features

    log = generate_log(GeneratorConfig(cards=max(rows // 40, 10), txns=rows, days=7, seed=11))
    offline = compute_features((line for line, _ in log.iter_lines()),
                               allowed_lateness_ms=300_000, now_ms=log.config.validation_now_ms)
    columns = [offline.table.column(n).to_pylist() for n in FEATURE_NAMES]
    return list(zip(*columns, strict=True))


def load_matrix(vectors: Path | None, rows: int, save: Path | None = None) -> np.ndarray:
    """float32 [N, F]: from an .npy file, else real vectors of a generated log (then saved)."""
    if vectors is not None:
        matrix = np.load(vectors)
        if matrix.dtype != np.float32 or matrix.ndim != 2 or matrix.shape[1] != len(FEATURE_NAMES):
            raise SystemExit(f"{vectors}: expected float32 [N, {len(FEATURE_NAMES)}]")
        return matrix
    matrix = features_matrix(real_vectors(rows))
    if save is not None:
        np.save(save, matrix)
    return matrix


def model_bytes(model_dir: Path, version: str | None) -> tuple[str, bytes]:
    """The model's name and ONNX bytes (models/<version>/model.onnx; default: models/DEFAULT)."""
    name = version or (model_dir / "DEFAULT").read_text(encoding="ascii").strip()
    return name, (model_dir / name / "model.onnx").read_bytes()


def cuda_variants(data: bytes, *, max_rows: int, graphs: bool) -> tuple[dict[str, Scorer], str]:
    """{"cuda", "cuda-bound", "cuda-graph"} as far as onnxruntime can build them, and a note."""
    if CUDA not in ort.get_available_providers():
        return {}, "CUDA absent (onnxruntime has no CUDA provider)"
    ort.set_default_logger_severity(4)  # the failure is reported below, not as a log line
    try:
        plain = OnnxScorer(data, device="cuda")
    except RuntimeError as exc:  # CUDA libraries missing, or a model CUDA cannot run whole
        return {}, f"no CUDA variant ({exc})"
    finally:
        ort.set_default_logger_severity(2)
    out: dict[str, Scorer] = {
        "cuda": plain,
        "cuda-bound": BoundScorer(plain.session, max_rows=max_rows),
    }
    note = "CUDA present"
    if graphs:
        try:
            session = OnnxScorer(data, device="cuda", cuda_options={"enable_cuda_graph": "1"})
            graph = BoundScorer(session.session, max_rows=max_rows, cuda_graph=True)
            graph.warm_up()
            out["cuda-graph"] = graph
        except Exception as exc:  # onnxruntime's own error types
            note += f"; CUDA graphs refused: {exc}"
    return out, note


def _per_call(scorer: Scorer, batches: list[np.ndarray], seconds: float,
              max_calls: int) -> float:
    """Seconds per call over one block of consecutive calls (at least one)."""
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        scorer.score(batches[calls % len(batches)])
        calls += 1
        now = time.perf_counter()
        if now >= deadline or calls >= max_calls:
            return (now - start) / calls


def measure(variants: dict[str, Scorer], matrix: np.ndarray, size: int, *, seconds: float,
            rounds: int, max_calls: int) -> dict[str, float]:
    """Seconds per call of each variant at `size`: the best of `rounds` interleaved blocks
    (the least disturbed by other work on the machine, as timeit does)."""
    count = max(1, min(len(matrix) // size, 64))
    batches = [matrix[i * size:(i + 1) * size] for i in range(count)]
    if len(batches[0]) < size:  # fewer vectors than the batch: repeat them
        batches = [np.resize(matrix, (size, matrix.shape[1]))]
    block = seconds / rounds / len(variants)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for scorer in variants.values():
        scorer.score(batches[0])  # warm (captures a graph, allocates a bucket)
    for _ in range(rounds):
        for name, scorer in variants.items():
            samples[name].append(_per_call(scorer, batches, block, max_calls))
    return {name: min(s) for name, s in samples.items()}


def fixed_cost(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """(intercept, slope) of seconds per call against rows: fixed cost and cost per row."""
    if len(sizes) < 2:
        return seconds[0], 0.0
    slope, intercept = np.polyfit(np.asarray(sizes, float), np.asarray(seconds, float), 1)
    return float(intercept), float(slope)


def conversion_rate(matrix: np.ndarray, size: int, seconds: float,
                    convert: Callable[[list[Vector]], np.ndarray]) -> float:
    """Rows/s of turning Python feature tuples into the model input at `size` rows a batch."""
    rows: list[Vector] = [tuple(r) for r in np.resize(matrix, (size, matrix.shape[1])).tolist()]
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds and calls < 100_000:
        convert(rows)
        calls += 1
    return calls * size / (time.perf_counter() - start)


def _asarray_conversion(rows: list[Vector]) -> np.ndarray:
    """A nested np.asarray (the conversion features_matrix replaces), the baseline of the ratio."""
    wide = np.asarray(rows, dtype=np.float64)
    if not np.isfinite(wide).all():
        raise ValueError("non-finite")
    return wide.astype(np.float32)


def trained_models(algorithms: list[str], rows: int, *, trees: int | None,
                   leaves: int | None) -> tuple[dict[str, bytes], dict[str, str], np.ndarray]:
    """One model per algorithm trained on a generated labelled log (default configs, same
    table), a line about each, and the log's evaluation rows as served (float32)."""
    from dataclasses import replace

    from app.datagen.config import GeneratorConfig
    from app.datagen.generator import generate_log
    from app.features.offline import compute_features
    from app.features.training_set import Label, build_training_set
    from app.scoring.dataset import labelled_rows
    from app.scoring.trainer import TrainConfig, train_model

    log = generate_log(GeneratorConfig(cards=max(rows // 40, 10), txns=rows, days=7, seed=11,
                                       fraud_rate=0.03))
    offline = compute_features((line for line, _ in log.iter_lines()),
                               allowed_lateness_ms=300_000, now_ms=log.config.validation_now_ms)
    labels = [Label(lab.txn_id, lab.label, lab.label_ts_ms) for lab in log.labels()]
    table = build_training_set(offline, labels).table
    models: dict[str, bytes] = {}
    about: dict[str, str] = {}
    boundary = 0
    for algorithm in algorithms:
        config = TrainConfig(algorithm=algorithm)  # type: ignore[arg-type]
        if algorithm == "lgbm":
            config = replace(config, gbt=replace(
                config.gbt, n_estimators=trees or config.gbt.n_estimators,
                num_leaves=leaves or config.gbt.num_leaves))
        model = train_model(table, config)
        card = model.card
        models[algorithm] = model.onnx_bytes
        size = (f"{card['model']['trees']} trees of <= {config.gbt.num_leaves} leaves"
                if algorithm == "lgbm" else f"hidden {card['model']['hidden_layers']}")
        about[algorithm] = (f"{model.version}: {size}, {len(model.onnx_bytes):,} bytes, eval "
                            f"PR AUC {card['metrics']['eval']['pr_auc']:.4f}")
        boundary = card["data"]["split"]["boundary_ts_ms"]
    rows_as_served = labelled_rows(table)
    return models, about, rows_as_served.matrix[rows_as_served.ts_ms >= boundary]


def compare_algorithms(args: argparse.Namespace, sizes: list[int]) -> int:
    """--algorithms: the CPU cost per row of each algorithm's model, side by side."""
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    if not algorithms or any(a not in ("mlp", "lgbm") for a in algorithms):
        print(f"--algorithms: expected names out of mlp,lgbm, got {args.algorithms!r}",
              file=sys.stderr)
        return 2
    models, about, matrix = trained_models(algorithms, args.rows, trees=args.gbt_trees,
                                           leaves=args.gbt_leaves)
    variants: dict[str, Scorer] = {a: OnnxScorer(data, device="cpu", name=a)
                                   for a, data in models.items()}
    for algorithm in algorithms:
        print(f"{algorithm}: {about[algorithm]}")
    print(f"CPU, one thread; {len(matrix):,} evaluation rows of the generated log; "
          f"{args.seconds:.1f}s per size, best of {args.rounds} interleaved blocks")
    first = algorithms[0]
    print(f"{'batch':>5} " + " ".join(f"{a + ' us/call':>14} {a + ' us/row':>13}"
                                      for a in algorithms)
          + "".join(f" {a + '/' + first:>11}" for a in algorithms[1:]))
    results: list[dict[str, float]] = []
    for size in sizes:
        per_call = measure(variants, matrix, size, seconds=args.seconds, rounds=args.rounds,
                           max_calls=args.max_calls)
        per_row = {a: s / size * 1e6 for a, s in per_call.items()}
        results.append({"batch": size, **{f"{a}_us_per_call": s * 1e6
                                          for a, s in per_call.items()},
                        **{f"{a}_us_per_row": r for a, r in per_row.items()},
                        **{f"{a}_over_{first}": per_row[a] / per_row[first]
                           for a in algorithms[1:]}})
        print(f"{size:>5} " + " ".join(f"{per_call[a] * 1e6:>14.2f} {per_row[a]:>13.3f}"
                                       for a in algorithms)
              + "".join(f" {per_row[a] / per_row[first]:>11.2f}" for a in algorithms[1:]))
    if args.json is not None:
        args.json.write_text(json.dumps({"models": about, "rows": len(matrix),
                                         "sizes": results}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path("models"))
    parser.add_argument("--version", default=None, help="Model version [default: DEFAULT].")
    parser.add_argument("--device", choices=["cpu", "auto", "cuda"], default="auto",
                        help="cpu: CPU variants only; cuda: fail without CUDA.")
    parser.add_argument("--sizes", default=None,
                        help=f"Batch sizes [default: {DEFAULT_SIZES}; with --algorithms: "
                             f"{COMPARE_SIZES}].")
    parser.add_argument("--seconds", type=float, default=1.0, help="Per batch size, all variants.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-calls", type=int, default=200_000, help="Per block.")
    parser.add_argument("--rows", type=int, default=20_000, help="Feature vectors to cycle.")
    parser.add_argument("--vectors", type=Path, default=None, help="float32 [N, F] .npy file.")
    parser.add_argument("--save-vectors", type=Path, default=None)
    parser.add_argument("--min-batch", type=int, default=None,
                        help="Hybrid crossover [default: calibrated, as the worker does].")
    parser.add_argument("--no-graphs", action="store_true", help="Skip the cuda-graph variant.")
    parser.add_argument("--json", type=Path, default=None, help="Write the figures here too.")
    parser.add_argument("--algorithms", default=None,
                        help="Compare algorithms instead (e.g. mlp,lgbm): train one model each "
                             "on a generated log, time their CPU sessions [sizes: 1,64,4096].")
    parser.add_argument("--gbt-trees", type=int, default=None,
                        help="--algorithms: the trees' n_estimators [default: train's].")
    parser.add_argument("--gbt-leaves", type=int, default=None,
                        help="--algorithms: the trees' num_leaves [default: train's].")
    args = parser.parse_args()

    default_sizes = DEFAULT_SIZES if args.algorithms is None else COMPARE_SIZES
    sizes = [int(s) for s in (args.sizes or default_sizes).split(",")]
    if args.algorithms is not None:
        return compare_algorithms(args, sizes)
    name, data = model_bytes(args.model_dir, args.version)
    matrix = load_matrix(args.vectors, args.rows, args.save_vectors)
    cpu = OnnxScorer(data, device="cpu")
    variants: dict[str, Scorer] = {"cpu": cpu}
    note = "CUDA not asked for (--device cpu)"
    if args.device != "cpu":
        cuda, note = cuda_variants(data, max_rows=max(sizes), graphs=not args.no_graphs)
        if args.device == "cuda" and not cuda:
            print(f"--device cuda: {note}", file=sys.stderr)
            return 2
        variants.update(cuda)
    tally = ProviderTally()
    bound = variants.get("cuda-graph") or variants.get("cuda-bound")
    hybrid_scorer: HybridScorer | None = None
    if isinstance(bound, BoundScorer):
        hybrid_scorer = hybrid(cpu, bound, metrics=tally, name=name, options=GpuOptions(
            min_batch=args.min_batch, max_rows=max(sizes), cuda_graph=bound.cuda_graph))
        variants["hybrid"] = hybrid_scorer
        crossing = "never" if hybrid_scorer.min_batch == NEVER else str(hybrid_scorer.min_batch)
    else:
        variants["hybrid"] = cpu
        crossing = "-"
        note += "; hybrid is the CPU session"
    print(f"model {name}; {note}; {len(matrix)} real feature vectors; {args.seconds:.1f}s per "
          f"size; hybrid {variants['hybrid'].active_provider} (CUDA from batch {crossing})")
    if hybrid_scorer is not None and hybrid_scorer.calibration is not None:
        print(f"calibration: {hybrid_scorer.calibration.describe()}")

    names = list(variants)
    print(f"{'batch':>5} " + " ".join(f"{n + ' rows/s':>17}" for n in names)
          + " " + " ".join(f"{n + '/cpu':>15}" for n in names[1:]) + f" {'hybrid/best':>11}")
    results: list[dict[str, float]] = []
    for size in sizes:
        per_call = measure(variants, matrix, size, seconds=args.seconds, rounds=args.rounds,
                           max_calls=args.max_calls)
        rate = {n: size / s for n, s in per_call.items()}
        best = max(r for n, r in rate.items() if n != "hybrid")
        results.append({"batch": size, **{f"{n}_rows_per_s": r for n, r in rate.items()},
                        **{f"{n}_us_per_call": s * 1e6 for n, s in per_call.items()},
                        "hybrid_over_best": rate["hybrid"] / best})
        print(f"{size:>5} " + " ".join(f"{rate[n]:>17,.0f}" for n in names) + " "
              + " ".join(f"{rate[n] / rate['cpu']:>15.2f}" for n in names[1:])
              + f" {rate['hybrid'] / best:>11.2f}")

    costs: dict[str, dict[str, float]] = {}
    print("per-call cost (us): " + f"{'variant':>12} {'at batch ' + str(sizes[0]):>14} "
          f"{'fit intercept':>14} {'ns per row':>11}")
    for n in names:
        intercept, slope = fixed_cost(sizes, [r[f"{n}_us_per_call"] / 1e6 for r in results])
        costs[n] = {"first_size_us": results[0][f"{n}_us_per_call"],
                    "intercept_us": intercept * 1e6, "ns_per_row": slope * 1e9}
        print(f"{'':>19} {n:>12} {costs[n]['first_size_us']:>14.1f} "
              f"{costs[n]['intercept_us']:>14.1f} {costs[n]['ns_per_row']:>11.2f}")
    worst = min(r["hybrid_over_best"] for r in results)
    print(f"hybrid / best other variant, lowest over sizes: {worst:.2f}; rows on CUDA in the "
          f"hybrid: {tally.share(CUDA):.1%}")
    conversion: dict[int, dict[str, float]] = {}
    for size in (64, 4096):
        old = new = 0.0
        for _ in range(3):  # interleaved, best of three
            old = max(old, conversion_rate(matrix, size, 0.3, _asarray_conversion))
            new = max(new, conversion_rate(matrix, size, 0.3, features_matrix))
        conversion[size] = {"features_matrix": new, "asarray_before": old}
        print(f"features_matrix (Python tuples to float32) at batch {size}: {new:,.0f} rows/s, "
              f"{new / old:.2f}x the former np.asarray conversion ({old:,.0f} rows/s)")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "model": name, "note": note, "hybrid": variants["hybrid"].active_provider,
            "min_batch": crossing, "calibration": None if hybrid_scorer is None
            or hybrid_scorer.calibration is None else hybrid_scorer.calibration.describe(),
            "sizes": results, "fixed_cost": costs, "hybrid_cuda_share": tally.share(CUDA),
            "conversion_rows_per_s": conversion}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
