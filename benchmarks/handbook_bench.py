"""The Fraud Detection Handbook's benchmark, end to end: fraudstream's row beside the book's.

    python -m benchmarks.handbook_bench [--data DIR] [--grid small|none] [--live] [--mlp]

1. The book's dataset (`fraudstream generate --profile handbook`, made once into DIR).
2. fraudstream's features over the whole log, the merchant features from its labels (each
   known 7 days after its transaction), exactly as the worker serves them.
3. Hyper-parameters of the gradient-boosted trees chosen by the book's prequential validation
   (4 folds from 2018-07-11, average precision), then the book's test protocol: the baseline
   week (train 2018-07-25..31, test 08-08..14) and 4 prequential test weeks (from 2018-08-15
   back), each trained on its own week and scored through the exported ONNX model (the artifact
   the worker serves).
4. `--live`: the baseline week with its 30 days of history and their labels replayed through
   Kafka and a real worker (the local stack): the served rows' scores give the figures again,
   and they must equal the offline scores row for row.
Prints a table (AUC ROC, average precision, Card Precision@100) beside the book's published
rows, and per fraud scenario the AUC of the test weeks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from app.features.declaration import FEATURE_NAMES
from app.quality import handbook as hb
from app.scoring.gbt import GbtParams, fit_lgbm, predict_proba, train_gbt

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / ".fraudstream" / "handbook"
BASE = GbtParams(n_estimators=300, learning_rate=0.02, num_leaves=15, min_child_samples=100,
                 subsample=0.8, colsample_bytree=0.8, num_threads=2)
GRIDS: dict[str, dict[str, list[Any]]] = {
    "none": {},
    "small": {"n_estimators": [300, 600], "num_leaves": [15, 31],
              "learning_rate": [0.02, 0.05]},
}


def ensure_data(data: Path) -> tuple[Path, Path, Path]:
    """The dataset's three files in `data`, generated when missing."""
    txns, labels = data / "txns.jsonl", data / "txns.labels.jsonl"
    scenarios = data / "txns.scenarios.parquet"
    if not (txns.exists() and labels.exists() and scenarios.exists()):
        data.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "app.cli.main", "generate", "--profile",
                        "handbook", "--out", str(txns), "--labels", str(labels)], check=True)
    return txns, labels, scenarios


@dataclass(frozen=True, slots=True)
class Table:
    """The offline rows of the whole log: features as the model reads them, and the truth."""

    txn_ids: np.ndarray
    cards: np.ndarray
    days: np.ndarray
    fraud: np.ndarray
    scenario: np.ndarray
    matrix: np.ndarray  # float32 [N, F], FEATURE_NAMES order


def offline_table(txns: Path, labels: Path, scenarios: Path) -> Table:
    from app.features.merchant import MerchantTable
    from app.features.offline import compute_features
    from app.transactions.labelfile import read_label_records

    t0 = time.perf_counter()
    records = list(read_label_records(labels))
    merchants = MerchantTable.of(records)
    t1 = time.perf_counter()
    result = compute_features(txns, allowed_lateness_ms=300_000, now_ms=2**62 // 4,
                              merchants=merchants)
    t2 = time.perf_counter()
    table = result.table
    truth = {r.txn_id: r.label for r in records}
    txn_ids = np.asarray(table.column("txn_id").to_pylist(), dtype=object)
    fraud = np.fromiter((truth[t] for t in txn_ids), dtype=np.int64, count=len(txn_ids))
    scen = pq.read_table(scenarios)
    by_id = dict(zip(scen.column("txn_id").to_pylist(), scen.column("scenario").to_pylist(),
                     strict=True))
    scenario = np.fromiter((by_id.get(t, 0) for t in txn_ids), dtype=np.int64,
                           count=len(txn_ids))
    matrix = np.column_stack([table.column(n).to_numpy().astype(np.float64)
                              for n in FEATURE_NAMES]).astype(np.float32)
    print(f"features: {len(txn_ids):,} rows x {len(FEATURE_NAMES)} ({result.summary()}); "
          f"labels {t1 - t0:.1f} s, features {t2 - t1:.1f} s", flush=True)
    return Table(txn_ids, np.asarray(table.column("card_id").to_pylist(), dtype=object),
                 hb.day_index(table.column("ts_ms").to_numpy()), fraud, scenario, matrix)


def candidates(grid: str) -> list[GbtParams]:
    from itertools import product

    choices = GRIDS[grid]
    if not choices:
        return [BASE]
    names = list(choices)
    return [GbtParams(**{**asdict(BASE), **dict(zip(names, combo, strict=True))})
            for combo in product(*(choices[n] for n in names))]


def validate(t: Table, grid: str) -> tuple[GbtParams, list[tuple[GbtParams, float]]]:
    """The book's prequential validation: 4 folds from VALID_START, average precision."""
    splits = hb.folds(t.days, t.cards, t.fraud, hb.VALID_START)
    scored = []
    for params in candidates(grid):
        aps = []
        for s in splits:
            model = fit_lgbm(t.matrix[s.train], t.fraud[s.train], params)
            p = predict_proba(model, t.matrix[s.test])
            aps.append(hb.figures(t.days[s.test], t.cards[s.test], t.fraud[s.test], p).ap)
        scored.append((params, float(np.mean(aps))))
        print(f"  valid AP {np.mean(aps):.3f}  {params}", flush=True)
    return max(scored, key=lambda x: x[1])[0], scored


def served_scores(t: Table, s: hb.Split, params: GbtParams) -> tuple[np.ndarray, bytes]:
    """Train on the split's week, export, score its test rows through the ONNX scorer."""
    from app.scoring.scorer import OnnxScorer

    model = train_gbt(t.matrix[s.train], t.fraud[s.train], params,
                      check_rows=t.matrix[s.test])
    scorer = OnnxScorer(model.onnx_bytes, device="cpu")
    return np.asarray(scorer.score(t.matrix[s.test]), dtype=np.float64), model.onnx_bytes


def mlp_rows(t: Table, base: hb.Split) -> tuple[hb.Figures, hb.Figures, hb.Figures]:
    """The `train` MLP recipe (its defaults) on the same splits, for comparison."""
    from app.scoring.trainer import TrainConfig, fit_classifier

    def run(s: hb.Split) -> hb.Figures:
        model = fit_classifier(t.matrix[s.train], t.fraud[s.train], TrainConfig())
        p = model.predict_proba(t.matrix[s.test].astype(np.float64))[:, 1]
        return hb.figures(t.days[s.test], t.cards[s.test], t.fraud[s.test], p)

    mean, std = hb.mean_std([run(s) for s in hb.folds(t.days, t.cards, t.fraud,
                                                        hb.TEST_START)])
    return run(base), mean, std


def per_scenario(t: Table, rows: np.ndarray, scores: np.ndarray) -> dict[int, float]:
    from sklearn.metrics import roc_auc_score

    out = {}
    genuine = t.fraud[rows] == 0
    for sc in (1, 2, 3):
        mask = genuine | (t.scenario[rows] == sc)
        y = t.fraud[rows][mask]
        if 0 < y.sum() < len(y):
            out[sc] = float(roc_auc_score(y, scores[mask]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--grid", choices=sorted(GRIDS), default="small")
    ap.add_argument("--live", action="store_true", help="also replay the baseline week live")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--mlp", action="store_true", help="also the MLP recipe, for comparison")
    args = ap.parse_args(argv)
    txns, labels, scenarios = ensure_data(args.data)
    t = offline_table(txns, labels, scenarios)
    began = time.perf_counter()
    best, grid = validate(t, args.grid)
    print(f"chosen by prequential validation (AP): {best} in {time.perf_counter() - began:.0f} s",
          flush=True)
    base = hb.split(t.days, t.cards, t.fraud, hb.BASELINE_START)
    base_scores, _ = served_scores(t, base, best)
    baseline = hb.figures(t.days[base.test], t.cards[base.test], t.fraud[base.test], base_scores)
    folds = []
    scen: dict[int, list[float]] = {1: [], 2: [], 3: []}
    for s in hb.folds(t.days, t.cards, t.fraud, hb.TEST_START):
        scores, _ = served_scores(t, s, best)
        folds.append(hb.figures(t.days[s.test], t.cards[s.test], t.fraud[s.test], scores))
        for k, v in per_scenario(t, s.test, scores).items():
            scen[k].append(v)
        print(f"  test week {s.test_days[0]}..{s.test_days[1]}: {folds[-1]} "
              f"({len(s.test):,} txns, {int(t.fraud[s.test].sum())} frauds)", flush=True)
    mean, std = hb.mean_std(folds)
    width = len(FEATURE_NAMES)
    rows = [(f"fraudstream: LightGBM, {width} features (baseline week)", "baseline", baseline,
             None),
            (f"fraudstream: LightGBM, {width} features (4 test weeks)", "folds", mean, std)]
    if args.mlp:
        mlp_base, mlp_mean, mlp_std = mlp_rows(t, base)
        rows += [(f"fraudstream: MLP recipe, {width} features (baseline week)", "baseline",
                  mlp_base, None),
                 (f"fraudstream: MLP recipe, {width} features (4 test weeks)", "folds",
                  mlp_mean, mlp_std)]
    rows += [(name, kind, fig, None) for name, kind, fig in hb.PUBLISHED]
    print("\n| model | AUC ROC | Average precision | Card Precision@100 |\n|---|---|---|---|")
    for name, _, fig, sd in rows:
        if sd is None:
            print(f"| {name} | {fig.auc:.3f} | {fig.ap:.3f} | {fig.cp100:.3f} |")
        else:
            print(f"| {name} | {fig.auc:.3f} ± {sd.auc:.3f} | {fig.ap:.3f} ± {sd.ap:.3f} | "
                  f"{fig.cp100:.3f} ± {sd.cp100:.3f} |")
    print("\nper scenario, AUC ROC of its frauds against all genuine rows (4 test weeks, mean): "
          + ", ".join(f"{k}: {np.mean(v):.3f}" for k, v in scen.items() if v))
    print(f"baseline week: {len(base.test):,} test txns, {int(t.fraud[base.test].sum())} frauds")
    live = None
    if args.live:
        from benchmarks.handbook_live import replay_baseline

        live = replay_baseline(t, base, best, txns, labels)
    if args.json:
        args.json.write_text(json.dumps({
            "chosen": asdict(best), "validation": [(asdict(p), a) for p, a in grid],
            "baseline": asdict(baseline), "folds": [asdict(f) for f in folds],
            "mean": asdict(mean), "std": asdict(std),
            "scenario_auc": {k: float(np.mean(v)) for k, v in scen.items() if v},
            "live": live}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
