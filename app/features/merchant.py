"""Merchant features: the labels of a merchant's transactions over delayed whole-day windows.

The rule (one definition, evaluated online by `MerchantBook` and offline by `MerchantTable`)
------------------------------------------------------------------------------------------
A label ℓ counts when it names the labelled transaction's merchant `m` and event time `t`
(labels without them feed no merchant feature). Days are UTC days, `day(x) = x // DAY_MS`.
ℓ is *known* from the day after it was reported: `known(ℓ) = day(reported_at) + 1`.

A transaction at τ on merchant m, scored with the label feed read through `cut` (every label
reported before `cut` has been read; offline the cut is +∞), gets for each declared window of
n days and delay D (7 days: the Fraud Detection Handbook's):

    counted = { ℓ of m : day(τ) − D − n ≤ day(t) < day(τ) − D  and  known(ℓ) ≤ min(day(τ), day(cut)) }
    merchant_labelled_<n>   = |counted|
    merchant_fraud_share_<n> = |{ℓ ∈ counted : label = 1}| / |counted|   (0.0 when empty)

So the value depends only on (m, day(τ), min(day(τ), day(cut))) and the label log: a replay,
a redelivery or another worker gets the same bits whenever its cut has passed τ's day (the
served row records the cut it used, and the audit recomputes with it). Each label_id counts
once (the first record); a correction is a second label of the same transaction, with its own
id, and both count from the day each is known. Counts are integers; the share is one Python
int / int division in both evaluators (numpy's float64 division of the same two integers
gives the same bits below 2**53).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from app.features.declaration import DAY_MS, MERCHANT_FEATURES, Feature, FeatureValue
from app.transactions.labels import LabelRecord

#: Days of delay and of window per merchant feature, in declaration order.
_SPECS: Final = tuple((f.aggregate, f.window.ms // DAY_MS, f.delay.ms // DAY_MS)
                      for f in MERCHANT_FEATURES if f.delay is not None)
#: The distinct (window, delay) pairs, each giving one (labelled, frauds) pair of counts.
_WINDOWS: Final = tuple(dict.fromkeys((n, d) for _, n, d in _SPECS))
_PICK: Final = tuple((_WINDOWS.index((n, d)), agg) for agg, n, d in _SPECS)
#: How far back a label's transaction day can matter for a query day.
_REACH_DAYS: Final = max((n + d for n, d in _WINDOWS), default=0)
#: The vector without any label (every count 0, every share 0.0).
EMPTY: Final[tuple[FeatureValue, ...]] = tuple(
    0 if agg == "labelled" else 0.0 for agg, _, _ in _SPECS)
#: A cut that has passed every day (offline: the whole label log is known).
NO_CUT: Final = 2**62


def day_of(ts_ms: int) -> int:
    """The UTC day index of a time in ms."""
    return ts_ms // DAY_MS


def known_day(reported_at_ms: int) -> int:
    """The first day a label reported at `reported_at_ms` counts for."""
    return reported_at_ms // DAY_MS + 1


def _vector(counts: Sequence[tuple[int, int]]) -> tuple[FeatureValue, ...]:
    out: list[FeatureValue] = []
    for w, agg in _PICK:
        labelled, frauds = counts[w]
        if agg == "labelled":
            out.append(labelled)
        else:
            out.append(frauds / labelled if labelled else 0.0)
    return tuple(out)


def usable(rec: LabelRecord) -> bool:
    """True when a label can feed the merchant features (it names merchant and event time)."""
    return rec.merchant_id is not None and rec.txn_ts_ms is not None


class MerchantBook:
    """The online evaluator: labels folded as they are read, vectors looked up per transaction.

    Per merchant: txn day → known day → [labels, frauds]. A vector is computed once per
    (merchant, day, effective cut day) and cached until a label of that merchant arrives.
    `horizon_days`: labels whose transaction day is that far behind the newest day asked about
    are let go (None: keep everything, as offline).
    """

    __slots__ = ("_by_merchant", "_cache", "_seen", "_newest_day", "_horizon", "labels")

    def __init__(self, *, horizon_days: int | None = None) -> None:
        self._by_merchant: dict[str, dict[int, dict[int, list[int]]]] = {}
        self._cache: dict[str, dict[tuple[int, int], tuple[FeatureValue, ...]]] = {}
        self._seen: dict[int, set[str]] = {}  # txn day → label ids (let go with the day)
        self._newest_day = -(2**62)
        self._horizon = horizon_days
        #: labels folded (usable, first of their id)
        self.labels = 0

    def add(self, rec: LabelRecord) -> bool:
        """Fold one label; False when it cannot count (no merchant or time, or seen before)."""
        if rec.merchant_id is None or rec.txn_ts_ms is None:
            return False
        tday = day_of(rec.txn_ts_ms)
        if self._horizon is not None and tday < self._newest_day - self._horizon:
            return False  # can no longer count for any transaction still to be scored
        seen = self._seen.setdefault(tday, set())
        if rec.label_id in seen:
            return False
        seen.add(rec.label_id)
        cell = self._by_merchant.setdefault(rec.merchant_id, {}).setdefault(tday, {}) \
            .setdefault(known_day(rec.reported_at_ms), [0, 0])
        cell[0] += 1
        cell[1] += rec.label
        self._cache.pop(rec.merchant_id, None)
        self.labels += 1
        return True

    def vector(self, merchant_id: str, ts_ms: int, cut_ms: int = NO_CUT) -> tuple[FeatureValue, ...]:
        """The merchant features (MERCHANT_FEATURE_NAMES order) of a transaction at `ts_ms`."""
        day = ts_ms // DAY_MS
        if day > self._newest_day:
            self._advance(day)
        days = self._by_merchant.get(merchant_id)
        if days is None:
            return EMPTY
        eff = min(day, cut_ms // DAY_MS)
        cached = self._cache.setdefault(merchant_id, {})
        key = (day, eff)
        got = cached.get(key)
        if got is None:
            got = cached[key] = _vector(self._counts(days, day, eff))
        return got

    @staticmethod
    def _counts(days: dict[int, dict[int, list[int]]], day: int,
                eff: int) -> list[tuple[int, int]]:
        out = []
        for n, delay in _WINDOWS:
            labelled = frauds = 0
            for tday in range(day - delay - n, day - delay):
                by_known = days.get(tday)
                if by_known:
                    for kday, (c, f) in by_known.items():
                        if kday <= eff:
                            labelled += c
                            frauds += f
            out.append((labelled, frauds))
        return out

    def _advance(self, day: int) -> None:
        self._newest_day = day
        if self._horizon is None:
            return
        floor = day - self._horizon
        self._cache.clear()  # a new day: yesterday's vectors are asked for again only rarely
        for tday in [d for d in self._seen if d < floor]:
            del self._seen[tday]
        for m in list(self._by_merchant):
            days = self._by_merchant[m]
            for tday in [d for d in days if d < floor]:
                del days[tday]
            if not days:
                del self._by_merchant[m]


#: Online, how far back labels are kept: the widest window and delay, plus a month for
#: transactions re-scored from the card state's horizon (redeliveries within 30 days).
ONLINE_HORIZON_DAYS: Final = _REACH_DAYS + 32


@dataclass(frozen=True, slots=True)
class MerchantTable:
    """The offline evaluator over a whole label log (full knowledge: no cut).

    Each label adds +1 (and +label) to its merchant's counts on the days it counts for,
    [max(day(t) + D + 1, known), day(t) + D + n], as a +/− pair; a query (merchant, day) is
    the prefix sum of its merchant's pairs up to that day, found by one searchsorted.
    """

    codes: dict[str, int]
    keys: tuple[np.ndarray, ...]  # per window: sorted int64 keys (merchant code, day)
    labelled: tuple[np.ndarray, ...]  # per window: prefix sums in key order
    frauds: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, records: Iterable[LabelRecord]) -> MerchantTable:
        codes: dict[str, int] = {}
        seen: set[str] = set()
        m_list: list[int] = []
        t_list: list[int] = []
        k_list: list[int] = []
        y_list: list[int] = []
        for rec in records:
            if rec.merchant_id is None or rec.txn_ts_ms is None or rec.label_id in seen:
                continue
            seen.add(rec.label_id)
            m_list.append(codes.setdefault(rec.merchant_id, len(codes)))
            t_list.append(day_of(rec.txn_ts_ms))
            k_list.append(known_day(rec.reported_at_ms))
            y_list.append(rec.label)
        m = np.asarray(m_list, dtype=np.int64)
        t = np.asarray(t_list, dtype=np.int64)
        k = np.asarray(k_list, dtype=np.int64)
        y = np.asarray(y_list, dtype=np.int64)
        keys, labelled, frauds = [], [], []
        for n, delay in _WINDOWS:
            lo = np.maximum(t + delay + 1, k)
            hi = t + delay + n
            ok = lo <= hi
            mm, lo, hi, yy = m[ok], lo[ok], hi[ok], y[ok]
            ev_key = np.concatenate([_key(mm, lo), _key(mm, hi + 1)])
            ones = np.ones(len(mm), dtype=np.int64)
            ev_n = np.concatenate([ones, -ones])
            ev_f = np.concatenate([yy, -yy])
            order = np.argsort(ev_key, kind="stable")
            keys.append(ev_key[order])
            labelled.append(np.cumsum(ev_n[order]))
            frauds.append(np.cumsum(ev_f[order]))
        return cls(codes, tuple(keys), tuple(labelled), tuple(frauds))

    def columns(self, merchant_ids: Sequence[str], ts_ms: np.ndarray) -> list[np.ndarray]:
        """The merchant feature columns (MERCHANT_FEATURE_NAMES order) for n transactions."""
        get = self.codes.get
        code = np.fromiter((get(x, -1) for x in merchant_ids), dtype=np.int64,
                           count=len(merchant_ids))
        day = np.asarray(ts_ms, dtype=np.int64) // DAY_MS
        known = code >= 0
        qkey = _key(np.where(known, code, 0), day)
        per_window = []
        for w in range(len(_WINDOWS)):
            keys = self.keys[w]
            idx = np.searchsorted(keys, qkey, side="right") - 1
            hit = known & (idx >= 0)
            safe = np.where(hit, idx, 0)
            lab = np.where(hit, self.labelled[w][safe] if len(keys) else 0, 0)
            fr = np.where(hit, self.frauds[w][safe] if len(keys) else 0, 0)
            per_window.append((lab, fr))
        out: list[np.ndarray] = []
        for w, agg in _PICK:
            lab, fr = per_window[w]
            if agg == "labelled":
                out.append(lab.astype(np.int64))
            else:
                share = np.zeros(len(lab), dtype=np.float64)
                nz = lab > 0
                share[nz] = fr[nz].astype(np.float64) / lab[nz].astype(np.float64)
                out.append(share)
        return out


_DAY_BITS: Final = 24  # day indices up to ~45,000 years: the key is (code << 24) | (day + 2**23)


def _key(code: np.ndarray, day: np.ndarray) -> np.ndarray:
    return (code.astype(np.int64) << _DAY_BITS) | (day.astype(np.int64) + (1 << 23))


def feature_of(name: str) -> Feature:
    """The declared merchant feature named `name`."""
    return next(f for f in MERCHANT_FEATURES if f.name == name)
