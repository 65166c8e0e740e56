"""Where the handbook benchmark's last Card Precision@100 points are: candidate columns, offline.

    python -m benchmarks.handbook_probe [--data DIR] [--probe base,oracle,outliers]

The 37 declared features (benchmarks.handbook_bench's table) against the same table with extra
columns computed here in numpy, each trained and scored on the book's 4 prequential test weeks
with the base gradient-boosted trees (300 trees, no validation grid). None of these columns is
declared: a probe measures whether one would be worth declaring.
- `oracle`: merchant fraud counts and shares over the (t - 7 - n days, t - 7 days] windows
  (n = 1, 7, 30) counting only compromised-terminal frauds (the scenario truth, which no system
  has): what label-noise-free merchant features could add at most.
- `outliers`: the card's transactions in the last 14 days whose amount was over 3x its 30-day
  mean, and over 2.5x in 7 days (the current transaction excluded).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import orjson

from app.features.declaration import FEATURE_NAMES
from app.quality import handbook as hb
from app.scoring.contract import FeatureSpec
from app.scoring.gbt import fit_lgbm, predict_proba
from benchmarks.handbook_bench import BASE, DEFAULT_DATA, Table, ensure_data, offline_table

DAY_MS = 86_400_000


def _log_columns(t: Table, txns: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merchant number, event time and amount of every table row, from the log."""
    index = {x: i for i, x in enumerate(t.txn_ids.tolist())}
    merchant = np.empty(len(index), np.int64)
    ts = np.empty(len(index), np.int64)
    amount = np.empty(len(index), np.int64)
    with txns.open("rb") as f:
        for line in f:
            o = orjson.loads(line)
            i = index[o["txn_id"]]
            merchant[i], ts[i], amount[i] = int(o["merchant_id"][1:]), o["ts_ms"], o["amount_minor"]
    return merchant, ts, amount


def _windowed(group: np.ndarray, ts: np.ndarray, flag: np.ndarray, lo_ms: int, hi_ms: int,
              *, right: bool) -> np.ndarray:
    """Per row: the sum of `flag` over the rows of its group with event time in
    [t - lo, t - hi) (`right`: (t - lo, t - hi])."""
    order = np.lexsort((ts, group))
    g, t = group[order] << 41, ts[order]  # event times in ms stay below 2**41 until 2039
    keys = g + t
    side = "right" if right else "left"
    lo = np.searchsorted(keys, g + (t - lo_ms), side=side)
    hi = np.searchsorted(keys, g + (t - hi_ms), side=side)
    sums = np.concatenate([[0.0], np.cumsum(flag[order])])
    out = np.empty(len(ts))
    out[order] = sums[hi] - sums[lo]
    return out


def probe_columns(name: str, t: Table, merchant: np.ndarray, ts: np.ndarray,
                  cards: np.ndarray) -> list[np.ndarray]:
    """The extra columns of probe `name` (none for `base`)."""
    ones = np.ones(len(ts))
    if name == "oracle":
        cols = []
        for n in (1, 7, 30):
            seen = _windowed(merchant, ts, ones, (7 + n) * DAY_MS, 7 * DAY_MS, right=True)
            frauds = _windowed(merchant, ts, (t.scenario == 2).astype(float), (7 + n) * DAY_MS,
                               7 * DAY_MS, right=True)
            cols += [frauds, frauds / np.maximum(seen, 1)]
        return cols
    if name == "outliers":
        ratio = t.matrix[:, FEATURE_NAMES.index("amount_to_mean_30d")].astype(np.float64)
        return [_windowed(cards, ts, (ratio > 3).astype(float), 14 * DAY_MS, 0,
                          right=False),
                _windowed(cards, ts, (ratio > 2.5).astype(float), 7 * DAY_MS, 0,
                          right=False)]
    if name == "base":
        return []
    raise SystemExit(f"unknown probe {name!r}: base, oracle or outliers")


def four_weeks(t: Table, matrix: np.ndarray) -> hb.Figures:
    """The mean figures of the 4 prequential test weeks, the base trees on `matrix`."""
    spec = FeatureSpec(tuple(f"f{i}" for i in range(matrix.shape[1])),
                       {f"f{i}": "float64" for i in range(matrix.shape[1])})
    figures = []
    for s in hb.folds(t.days, t.cards, t.fraud, hb.TEST_START):
        model = fit_lgbm(matrix[s.train], t.fraud[s.train], BASE, spec=spec)
        scores = predict_proba(model, matrix[s.test])
        figures.append(hb.figures(t.days[s.test], t.cards[s.test], t.fraud[s.test], scores))
    return hb.mean_std(figures)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--probe", default="base,oracle,outliers")
    args = ap.parse_args(argv)
    txns, labels, scenarios = ensure_data(args.data)
    t = offline_table(txns, labels, scenarios)
    merchant, ts, _ = _log_columns(t, txns)
    cards = np.array([int(c[1:]) for c in t.cards], dtype=np.int64)
    print("\n| probe | AUC ROC | Average precision | Card Precision@100 |\n|---|---|---|---|")
    for name in args.probe.split(","):
        began = time.perf_counter()
        extra = probe_columns(name, t, merchant, ts, cards)
        matrix = np.column_stack([t.matrix, *extra]).astype(np.float32) if extra else t.matrix
        fig = four_weeks(t, matrix)
        print(f"| {name} (+{len(extra)} columns) | {fig.auc:.4f} | {fig.ap:.4f} | "
              f"{fig.cp100:.4f} |  ({time.perf_counter() - began:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
