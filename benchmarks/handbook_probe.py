"""Where the handbook benchmark's last Card Precision@100 points are: candidate columns, offline.

    python -m benchmarks.handbook_probe [--data DIR] [--probe base,oracle,outliers,...]

The declared features (benchmarks.handbook_bench's table) against the same table with extra
columns computed here in numpy, each trained and scored on the book's 4 prequential test weeks
with the base gradient-boosted trees (300 trees, no validation grid). A probe measures whether a
column would be worth declaring; `outliers` and `unexplained` were measured this way beside the
37 features of 2026-12-01 and are declared since in a form the stream computes exactly
(`outliers_30d` / `outliers_7d` against the scored transaction's own 30-day mean,
`merchant_unexplained_*` without the amount test: docs/handbook.md), so beside the 42 features
they measure only their variants.
- `oracle`: merchant fraud counts and shares over the (t - 7 - n days, t - 7 days] windows
  (n = 1, 7, 30) counting only compromised-terminal frauds (the scenario truth, which no system
  has): what label-noise-free merchant features could add at most.
- `outliers`: the card's transactions in the last 14 days whose amount was over 3x its 30-day
  mean, and over 2.5x in 7 days (the current transaction excluded).
- `unexplained`: merchant frauds over (t - 7 - n days, t - 7 days - 1 hour] (n = 1, 7, 30; an
  hour short of the merchant features' whole-hour rule) counting only the frauds that nothing
  else explains: an amount of at most 220.00 and no fraud of the same card in the 14
  days before (labels a system would know by then: they precede the labelled transaction).
- `longmax`: the card's largest amount over 7 and 30 days, and the 7-day one over the 30-day
  mean.
Probes combine with `+` (`outliers+unexplained`: the columns of both).

`--ceiling` prints, beside them, the best Card Precision@100 any model on label-fed features
with this delay can expect: every fraud scored first except the compromised-terminal frauds
whose terminal's last label known at the transaction's hour is not a compromised-terminal fraud
of the last 28 days (its compromise is younger than the delay); those and the genuine rows in a
random order (seeds 0-4, their mean and range).
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from pathlib import Path

import numpy as np
import orjson

from app.features.declaration import FEATURE_NAMES, HOUR_MS
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


def _window_max(group: np.ndarray, ts: np.ndarray, value: np.ndarray, ms: int) -> np.ndarray:
    """Per row: the largest `value` over the rows of its group with event time in (t - ms, t],
    rows of equal time up to this one in log order (a monotone queue per group)."""
    order = np.lexsort((np.arange(len(ts)), ts, group))
    out = np.empty(len(ts))
    queue: deque[tuple[int, float]] = deque()
    previous = None
    for i in order.tolist():
        if group[i] != previous:
            queue.clear()
            previous = group[i]
        while queue and queue[-1][1] <= value[i]:
            queue.pop()
        queue.append((int(ts[i]), float(value[i])))
        while queue[0][0] <= ts[i] - ms:
            queue.popleft()
        out[i] = queue[0][1]
    return out


def _known_before(ts: np.ndarray) -> np.ndarray:
    """The last transaction time whose label is known at each row's hour (7 days' delay)."""
    return (ts // HOUR_MS) * HOUR_MS - 7 * DAY_MS - 1


def probe_columns(name: str, t: Table, merchant: np.ndarray, ts: np.ndarray,
                  cards: np.ndarray, amount: np.ndarray) -> list[np.ndarray]:
    """The extra columns of probe `name` (none for `base`; `a+b` for both)."""
    if "+" in name:
        return [c for part in name.split("+")
                for c in probe_columns(part, t, merchant, ts, cards, amount)]
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
    if name == "unexplained":
        fraud = t.fraud.astype(float)
        card_before = _windowed(cards, ts, fraud, 14 * DAY_MS, 0, right=False)
        alone = fraud * ((amount <= 22_000) & (card_before == 0))
        return [_windowed(merchant, ts, alone, (7 + n) * DAY_MS, 7 * DAY_MS + HOUR_MS,
                          right=True) for n in (1, 7, 30)]
    if name == "longmax":
        mean30 = t.matrix[:, FEATURE_NAMES.index("mean_30d")].astype(np.float64)
        max7 = _window_max(cards, ts, amount.astype(np.float64), 7 * DAY_MS)
        return [max7, _window_max(cards, ts, amount.astype(np.float64), 30 * DAY_MS),
                max7 / mean30]
    if name == "base":
        return []
    raise SystemExit(f"unknown probe {name!r}: base, oracle, outliers, unexplained or longmax")


def ceiling(t: Table, merchant: np.ndarray, ts: np.ndarray, seeds: int = 5) -> list[float]:
    """CP@100 over the 4 test weeks when every detectable fraud is scored first (module doc)."""
    n = len(ts)
    order = np.lexsort((np.arange(n), ts, merchant))
    keys = (merchant[order] << 41) + ts[order]
    at = np.searchsorted(keys, (merchant << 41) + _known_before(ts), side="right") - 1
    last = order[np.clip(at, 0, n - 1)]
    seen = (at >= 0) & (merchant[last] == merchant)
    compromise_known = seen & (t.scenario[last] == 2) & (ts[last] >= ts - 28 * DAY_MS)
    detectable = (t.fraud == 1) & ((t.scenario != 2) | compromise_known)
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        weeks = [hb.card_precision_at_k(t.days[s.test], t.cards[s.test], t.fraud[s.test],
                                        detectable[s.test] * 2.0 + rng.random(len(s.test)))
                 for s in hb.folds(t.days, t.cards, t.fraud, hb.TEST_START)]
        out.append(float(np.mean(weeks)))
    return out


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
    ap.add_argument("--probe", default="base,oracle,outliers,unexplained,longmax,"
                    "outliers+unexplained")
    ap.add_argument("--ceiling", action="store_true", help="also the Card Precision@100 ceiling")
    args = ap.parse_args(argv)
    txns, labels, scenarios = ensure_data(args.data)
    t = offline_table(txns, labels, scenarios)
    merchant, ts, amount = _log_columns(t, txns)
    cards = np.array([int(c[1:]) for c in t.cards], dtype=np.int64)
    if args.ceiling:
        cps = ceiling(t, merchant, ts)
        print(f"ceiling: Card Precision@100 {np.mean(cps):.4f} (seeds 0-{len(cps) - 1}: "
              f"{min(cps):.4f}..{max(cps):.4f})", flush=True)
    print("\n| probe | AUC ROC | Average precision | Card Precision@100 |\n|---|---|---|---|")
    for name in args.probe.split(","):
        began = time.perf_counter()
        extra = probe_columns(name, t, merchant, ts, cards, amount)
        matrix = np.column_stack([t.matrix, *extra]).astype(np.float32) if extra else t.matrix
        fig = four_weeks(t, matrix)
        print(f"| {name} (+{len(extra)} columns) | {fig.auc:.4f} | {fig.ap:.4f} | "
              f"{fig.cp100:.4f} |  ({time.perf_counter() - began:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
