"""A brute-force oracle: the feature definition applied literally, by rescanning every event."""

from __future__ import annotations

from app.features.declaration import CARD_FEATURES as FEATURES
from app.features.declaration import MAX_WINDOW_MS
from app.features.outcome import Accepted, Late, Outcome, Redelivered
from app.transactions.contract import Transaction


class Oracle:
    """One card, in log order; keeps every accepted event forever (no eviction shortcuts)."""

    def __init__(self, allowed_lateness_ms: int) -> None:
        self.lateness = allowed_lateness_ms
        self.accepted: list[Transaction] = []
        self.first: dict[str, tuple[int | float, ...]] = {}
        self.max_ts: int | None = None

    def apply(self, txn: Transaction) -> Outcome:
        if self.max_ts is not None:
            horizon = self.max_ts - (MAX_WINDOW_MS + self.lateness)
            remembered = {e.txn_id for e in self.accepted if e.ts_ms >= horizon}
            if txn.txn_id in remembered:
                return Redelivered(self.first[txn.txn_id])
            if txn.ts_ms < self.max_ts - self.lateness:
                behind = self.max_ts - txn.ts_ms
                return Late(f"ts {txn.ts_ms} is {behind} ms behind", behind)
        features = self.features(txn)
        self.accepted.append(txn)
        self.first[txn.txn_id] = features
        self.max_ts = txn.ts_ms if self.max_ts is None else max(self.max_ts, txn.ts_ms)
        return Accepted(features)

    def features(self, txn: Transaction) -> tuple[int | float, ...]:
        """Every declared feature of `txn` over the events seen before it, plus itself."""
        tau = txn.ts_ms
        seen = [*self.accepted, txn]
        lengths = {f.window.ms for f in FEATURES} | {f.reference.ms for f in FEATURES
                                                     if f.reference is not None}
        windows = {w: [e for e in seen if tau - w < e.ts_ms <= tau] for w in lengths}
        out: list[int | float] = []
        for f in FEATURES:
            win = windows[f.window.ms]
            amounts = [e.amount_minor for e in win]
            if f.aggregate == "count":
                out.append(len(win))
            elif f.aggregate == "sum":
                out.append(sum(amounts))
            elif f.aggregate == "max":
                out.append(max(amounts))
            elif f.aggregate == "mean":
                out.append(sum(amounts) / len(amounts))
            elif f.aggregate == "distinct":
                out.append(len({getattr(e, f.source) for e in win}))
            elif f.aggregate == "since_prev":
                others = [e.ts_ms for e in self.accepted if tau - f.window.ms < e.ts_ms <= tau]
                out.append(tau - max(others) if others else -1)
            elif f.aggregate == "ratio_to_mean":
                out.append(txn.amount_minor / (sum(amounts) / len(amounts)))
            elif f.aggregate == "outliers":
                assert f.factor is not None and f.reference is not None
                (num, den), ref = f.factor, [e.amount_minor for e in windows[f.reference.ms]]
                others = [e.amount_minor for e in self.accepted
                          if tau - f.window.ms < e.ts_ms <= tau]
                out.append(sum(1 for a in others if den * a * len(ref) > num * sum(ref)))
            else:  # pragma: no cover
                raise AssertionError(f"oracle does not know {f.aggregate}")
        return tuple(out)


def assert_same(got: Outcome, want: Outcome) -> None:
    """Same outcome kind, same lateness, same features bit for bit (types included)."""
    assert type(got) is type(want), (got, want)
    if isinstance(got, Late):
        assert isinstance(want, Late)
        assert got.behind_ms == want.behind_ms
    else:
        assert not isinstance(want, Late)
        # repr distinguishes 5 from 5.0 and shows every float exactly (shortest round trip)
        assert repr(got.features) == repr(want.features)
