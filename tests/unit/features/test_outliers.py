"""The `outliers` card features, hand-computed on one small card history, in all three twins.

outliers_30d: the card's other events of (τ − 30d, τ] with amount · count_30d > 3 · sum_30d;
outliers_7d: those of (τ − 7d, τ] with 2 · amount · count_30d > 5 · sum_30d (count_30d and
sum_30d are the scored event's own, itself included). Exact integers: the history holds
several events exactly at the bar (not counted: the comparison is strict) and events exactly
at a window's start (not in it: windows are (τ − W, τ]).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from feature_logs import BASE, L, txn

from app.features.declaration import CARD_FEATURE_NAMES
from app.features.kernel import ACCEPTED, LATE, REDELIVERED, Fold
from app.features.offline import compute_features
from app.features.outcome import Accepted, Late, Redelivered
from app.features.state import CardState, CompiledCardState
from app.features.vector import LAYOUT
from app.transactions.contract import Transaction

D = 86_400_000
NOW = BASE + 10**11

#: (txn index, ts − BASE, amount, (outliers_30d, outliers_7d)); None: not accepted. The 30-day
#: window holds every earlier event here (the history spans 24 days).
HISTORY: list[tuple[int, int, int, tuple[int, int] | None]] = [
    (1, 0, 10, (0, 0)),  # nothing else
    (2, D, 10, (0, 0)),  # c=2 s=20: 30d e1 10·2 ≤ 60; 7d e1: 2·10·2 ≤ 100
    (3, 8 * D, 50, (0, 0)),  # c=3 s=70: 30d e1, e2 30 ≤ 210; 7d: e2 sits at τ − 7d (out)
    (4, 9 * D, 10, (0, 0)),  # c=4 s=80: 30d e3 200 ≤ 240; 7d e3 2·50·4 = 400 = 5·80: at the bar
    (5, 10 * D, 20, (0, 0)),  # c=5 s=100: 30d e3 250 ≤ 300; 7d e3 2·50·5 = 500 = 500: at the bar
    (6, 10 * D + 200_000, 110, (0, 0)),  # c=6 s=210: 30d e3 300 ≤ 630; 7d e3 600 ≤ 1050
    # out of order (100 s behind max_ts, within L): e6 (ts > τ) is not in its windows
    (7, 10 * D + 100_000, 20, (0, 0)),  # c=6 s=120 (e1..e5, e7): 7d e3 2·50·6 = 600 = 5·120
    (8, 10 * D + 250_000, 80, (0, 1)),  # c=8 s=310: 30d e6 880 ≤ 930; 7d e6 1760 > 1550
    (9, 11 * D, 10, (1, 1)),  # c=9 s=320: 30d e6 990 > 960, e8 720 ≤ 960; 7d e6 1980 > 1600
    (10, 24 * D, 10, (1, 0)),  # c=10 s=330: 30d e6 1100 > 990; 7d: none
    # out of order again: e10 is after it, so not in its windows
    (11, 24 * D - 200_000, 1, (1, 0)),  # c=10 s=321 (e1..e9, e11): 30d e6 1100 > 963
    (12, 24 * D - L - 1, 5, None),  # late
]
#: Redeliveries (new ts and amount: still their first features).
AGAIN = [(5, 25 * D, 10**6), (7, 25 * D, 1), (11, 3 * D, 7)]


def _log() -> list[Transaction]:
    log = [txn(i, BASE + dt, amount) for i, dt, amount, _ in HISTORY]
    return log + [txn(i, BASE + dt, amount) for i, dt, amount in AGAIN]


def _outliers(features: tuple) -> tuple[int, int]:
    named = dict(zip(CARD_FEATURE_NAMES, features, strict=True))
    return named["outliers_30d"], named["outliers_7d"]


ACCEPTED_ROWS = [(f"t{i}", want) for i, _, _, want in HISTORY if want is not None]

STATES = [pytest.param(CardState, id="python"),
          pytest.param(CompiledCardState, id="compiled", marks=pytest.mark.skipif(
              CompiledCardState is None, reason="app.features._state is not built"))]


@pytest.mark.parametrize("state_cls", STATES)
def test_card_state_outliers_by_hand(state_cls: type[CardState]) -> None:
    state = state_cls.empty()
    first: dict[str, tuple] = {}
    got = []
    log = _log()
    for k, t in enumerate(log):
        if k == len(HISTORY):  # before the redeliveries: through bytes, in both twins
            data = state.to_bytes()
            state = state_cls.from_bytes(data)
            assert state.to_bytes() == data
            assert CardState.from_bytes(data).to_bytes() == data
        out = state.apply(t, allowed_lateness_ms=L)
        if k < len(HISTORY):
            if HISTORY[k][3] is None:
                assert isinstance(out, Late)
                continue
            assert isinstance(out, Accepted)
            first[t.txn_id] = out.features
            got.append((t.txn_id, _outliers(out.features)))
            assert all(type(v) is int for v in _outliers(out.features))
        else:
            assert isinstance(out, Redelivered)
            assert repr(out.features) == repr(first[t.txn_id])
            assert repr(state.recall(t.txn_id)) == repr(first[t.txn_id])
    assert got == ACCEPTED_ROWS


def test_both_states_write_the_same_bytes() -> None:
    if CompiledCardState is None:
        pytest.skip("app.features._state is not built")
    py, c = CardState.empty(), CompiledCardState.empty()
    for t in _log():
        assert repr(py.apply(t, allowed_lateness_ms=L)) == repr(c.apply(t, allowed_lateness_ms=L))
        assert py.to_bytes() == c.to_bytes()


def test_fold_outliers_by_hand() -> None:
    log = _log()
    result = compute_features([t.to_json() for t in log], allowed_lateness_ms=L, now_ms=NOW)
    table = result.table
    rows = list(zip(table.column("txn_id").to_pylist(), table.column("outliers_30d").to_pylist(),
                    table.column("outliers_7d").to_pylist(), strict=True))
    assert [(tid, (a, b)) for tid, a, b in rows] == ACCEPTED_ROWS
    assert (result.accepted, result.late, result.redelivered) == (len(ACCEPTED_ROWS), 1, 3)

    # the kernel's primitives themselves: the outliers slots come last, in LAYOUT.outliers order
    fold = Fold(allowed_lateness_ms=L)
    batch = pa.Table.from_pylist([t.to_dict() for t in log])
    folded = fold.apply(batch)
    status = folded.status.tolist()
    assert status == ([ACCEPTED] * len(ACCEPTED_ROWS) + [LATE] + [REDELIVERED] * len(AGAIN))
    base = LAYOUT.width - len(LAYOUT.outliers)
    index = {ms: i for i, ms in enumerate(LAYOUT.windows)}
    slots = [base + LAYOUT.outliers.index((index[W], index[30 * D], num, den))
             for W, num, den in ((30 * D, 3, 1), (7 * D, 5, 2))]
    accepted = np.flatnonzero(folded.status == ACCEPTED)
    prims = folded.prims[:, accepted]
    assert [tuple(int(prims[s, k]) for s in slots) for k in range(len(accepted))] == [
        want for _, want in ACCEPTED_ROWS]
