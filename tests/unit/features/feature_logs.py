"""Hypothesis strategies and helpers that build card transaction logs for the feature tests."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from app.features.declaration import MAX_WINDOW_MS, WINDOWS
from app.transactions.contract import Transaction

BASE = 1_700_000_000_000
L = 300_000
STEPS = (1, 999, 59_999, 60_000, 60_001, 299_999, 300_000, 300_001, 3_599_999, 3_600_000,
         3_600_001, 86_399_999, 86_400_000, 86_400_001)


def txn(i: int | str, ts: int, amount: int = 100, merchant: str = "m0", country: str = "FR",
        card: str = "card") -> Transaction:
    """A valid transaction with txn_id `t{i}`."""
    return Transaction(f"t{i}", card, ts, amount, "EUR", merchant, 5411, country, "pos")


@st.composite
def card_logs(
    draw: st.DrawFn, lateness: int | None = None, card: str = "card", max_size: int = 40
) -> tuple[int, list[Transaction], list[bool], int]:
    """One card's log: equal ts, window edges, out-of-order within/past L, redeliveries, gaps.

    Returns (lateness, log, restart-after-this-event flags, compaction threshold to use).
    """
    if lateness is None:
        lateness = draw(st.sampled_from([0, 1, 1_000, L]))
    n = draw(st.integers(1, max_size))
    txns: list[Transaction] = []
    cur = BASE
    seen = [BASE]
    for i in range(n):
        if txns and draw(st.integers(0, 7)) == 0:
            txns.append(draw(st.sampled_from(txns)))  # redelivery, possibly long after
            continue
        mode = draw(st.sampled_from(["same", "step", "edge", "back", "gap", "random"]))
        if mode == "same":
            ts = cur
        elif mode == "step":
            ts = cur + draw(st.sampled_from(STEPS))
        elif mode == "edge":  # τ − W lands exactly on, or one ms either side of, an earlier ts
            ts = (draw(st.sampled_from(seen)) + draw(st.sampled_from(WINDOWS)).ms
                  + draw(st.sampled_from([-1, 0, 1])))
        elif mode == "back":
            ts = cur - draw(st.sampled_from(
                [0, 1, max(lateness - 1, 0), lateness, lateness + 1, 2 * lateness + 7]))
        elif mode == "gap":  # past every window and the lateness: forces eviction
            ts = cur + MAX_WINDOW_MS + lateness + draw(st.integers(-1, 2_000_000))
        else:
            ts = cur + draw(st.integers(-2 * lateness - 1_000, 4_000_000))
        amount = draw(st.sampled_from([1, 2, 3, 5, 8, 10**12]))
        merchant = draw(st.sampled_from(["m0", "m1", "m2", "m3"]))
        country = draw(st.sampled_from(["FR", "DE", "US"]))
        txns.append(txn(f"{card}-{i}", ts, amount, merchant, country, card))
        cur = max(cur, ts)
        seen.append(ts)
    roundtrips = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    compact_min = draw(st.sampled_from([1, 2, 64]))
    return lateness, txns, roundtrips, compact_min


def served_rows(table: pa.Table, **overrides: Any) -> list[dict[str, Any]]:
    """What the stream would have served for each accepted row."""
    rows = []
    for r in table.to_pylist():
        feats = {k: v for k, v in r.items() if k not in ("txn_id", "card_id", "ts_ms")}
        rows.append({"txn_id": r["txn_id"], "card_id": r["card_id"], "ts_ms": r["ts_ms"],
                     "partition": 0, "offset": len(rows), "features": feats | overrides,
                     "score": 0.5, "model_version": "m1"})
    return rows


def bucketed_count_5m(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The classic skew: count_5m over five tumbling 1-minute buckets instead of (τ − 5m, τ]."""
    out = []
    for i, row in enumerate(rows):
        tau = row["ts_ms"]
        count = sum(1 for prev in rows[: i + 1] if prev["card_id"] == row["card_id"]
                    and prev["ts_ms"] <= tau and prev["ts_ms"] // 60_000 >= tau // 60_000 - 4)
        out.append(row | {"features": row["features"] | {"count_5m": count}})
    return out
