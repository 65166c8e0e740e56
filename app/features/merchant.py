"""Merchant features: the labels of a merchant's transactions over delayed whole-hour windows.

The rule (one definition, evaluated online by `MerchantBook` and offline by `MerchantTable`)
------------------------------------------------------------------------------------------
A label ℓ counts when it names the labelled transaction's merchant `m` and event time `t`
(labels without them feed no merchant feature). Hours are whole UTC hours,
`hour(x) = x // HOUR_MS`. ℓ is *known* from the hour after it was reported:
`known(ℓ) = hour(reported_at) + 1`.

A transaction at τ on merchant m, scored with the label feed read through `cut` (every label
reported before `cut` has been read; offline the cut is +∞), gets for each declared window of
n hours and delay D (7 days: the Fraud Detection Handbook's):

    counted = { ℓ of m : hour(τ) − D − n ≤ hour(t) < hour(τ) − D
                         and known(ℓ) ≤ min(hour(τ), hour(cut)) }
    merchant_labelled_<n>    = |counted|
    merchant_frauds_<n>      = |{ℓ ∈ counted : label = 1}|
    merchant_fraud_share_<n> = frauds / labelled   (0.0 when empty)
    merchant_fraud_streak_<n> = the fraud labels in a row at the end of `counted` ordered by
                               (transaction time, label_id)
    merchant_hours_since_genuine_<n> = (hour(τ) − D) − hour(t) of the last genuine label of
                               `counted` in that order (n + 1 when there is none)
    merchant_streak_age_<n>  = (hour(τ) − D) − hour(t) of the first label of that fraud run
                               (0 when the run is empty)
    merchant_unexplained_<n> = |{ℓ ∈ counted : label = 1 and explained(ℓ) > min(hour(τ), hour(cut))}|

where a fraud label ℓ of card c is *explained* from the first hour a fraud label ℓ′ of the same
card with t − E ≤ t′ < t (E = 14 days, the declaration's EXPLAINED_BY) is known:
`explained(ℓ) = min known(ℓ′)` over those ℓ′ (never when there is none, or ℓ names no card).
A compromised card's frauds explain each other; a compromised merchant's frauds fall on cards
with no fraud before them. A late ℓ′ explains ℓ only from the hour ℓ′ is known, so this too is a
function of the label log and the effective cut hour.

So the value depends only on (m, hour(τ), min(hour(τ), hour(cut))) and the label log: a
replay, a redelivery or another worker gets the same bits whenever its cut has passed τ's hour
(the served row records the cut it used, and the audit recomputes with it). Each label_id
counts once (the first record); a correction is a second label of the same transaction, with
its own id, and both count from the hour each is known. Counts are integers; the share is one
Python int / int division in both evaluators (numpy's float64 division of the same two integers
gives the same bits below 2**53).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from app.features.declaration import EXPLAINED_BY, HOUR_MS, MERCHANT_FEATURES, FeatureValue
from app.transactions.labels import LabelRecord

#: (aggregate, window hours, delay hours) per merchant feature, in declaration order.
_SPECS: Final = tuple((f.aggregate, f.window.ms // HOUR_MS, f.delay.ms // HOUR_MS)
                      for f in MERCHANT_FEATURES if f.delay is not None)
#: The distinct (window, delay) pairs, each giving one (labelled, frauds, streak, since, age,
#: unexplained) tuple.
_WINDOWS: Final = tuple(dict.fromkeys((n, d) for _, n, d in _SPECS))
#: The windows whose order-dependent aggregates (streak, hours since genuine) are declared.
_SCANNED: Final = frozenset(_WINDOWS.index((n, d)) for agg, n, d in _SPECS
                            if agg in ("fraud_streak", "hours_since_genuine", "streak_age"))
_PICK: Final = tuple((_WINDOWS.index((n, d)), agg) for agg, n, d in _SPECS)
#: How far back a label's transaction hour can matter for a query hour.
_REACH: Final = max((n + d for n, d in _WINDOWS), default=0)
#: A label known no later than this many hours after its transaction's hour counts in every
#: window that holds it, whatever the query hour: only later ("slow") labels need a check.
_PROMPT: Final = min((d for _, d in _WINDOWS), default=0) + 1
#: The vector without any label (every count 0, every share 0.0, no genuine: window + 1).
EMPTY: Final[tuple[FeatureValue, ...]] = tuple(
    0.0 if agg == "fraud_share" else n + 1 if agg == "hours_since_genuine" else 0
    for agg, n, _ in _SPECS)
#: A cut that has passed every hour (offline: the whole label log is known).
NO_CUT: Final = 2**62
#: The hour of a fraud label that nothing explains.
NEVER: Final = 2**62
#: How far before a fraud label the card's other fraud labels explain it (ms, hours).
EXPLAIN_MS: Final = EXPLAINED_BY.ms
_EXPLAIN_HOURS: Final = EXPLAIN_MS // HOUR_MS
#: Online, how far back labels are kept (hours): the widest window and delay, plus a month
#: for transactions re-scored within the card state's horizon (redeliveries within 30 days).
ONLINE_HORIZON_HOURS: Final = _REACH + 32 * 24


def hour_of(ts_ms: int) -> int:
    """The UTC hour index of a time in ms."""
    return ts_ms // HOUR_MS


def known_hour(reported_at_ms: int) -> int:
    """The first hour a label reported at `reported_at_ms` counts for."""
    return reported_at_ms // HOUR_MS + 1


def _vector(counts: Sequence[tuple[int, int, int, int, int, int]]) -> tuple[FeatureValue, ...]:
    out: list[FeatureValue] = []
    for w, agg in _PICK:
        labelled, frauds, streak, since, age, unexplained = counts[w]
        if agg == "unexplained":
            out.append(unexplained)
        elif agg == "labelled":
            out.append(labelled)
        elif agg == "frauds":
            out.append(frauds)
        elif agg == "fraud_share":
            out.append(frauds / labelled if labelled else 0.0)
        elif agg == "fraud_streak":
            out.append(streak)
        elif agg == "hours_since_genuine":
            out.append(since)
        else:
            out.append(age)
    return tuple(out)


class _Fraud:
    """One fraud label, as the merchant's and the card's lists share it: `explained` is the
    first hour its card explains it (NEVER while nothing does); later labels may lower it."""

    __slots__ = ("key", "known", "explained", "merchant")

    def __init__(self, key: tuple[int, str], known: int, explained: int, merchant: str) -> None:
        self.key = key
        self.known = known
        self.explained = explained
        self.merchant = merchant


class _Labels:
    """One merchant's labels ordered by (transaction time, label_id), with prefix counts."""

    __slots__ = ("order", "hours", "known", "fraud", "cum_n", "cum_f", "slow", "frauds",
                 "fraud_keys")

    def __init__(self) -> None:
        self.order: list[tuple[int, str]] = []  # (transaction ms, label_id)
        self.hours: list[int] = []
        self.known: list[int] = []
        self.fraud: list[int] = []
        self.cum_n: list[int] = [0]  # labels before index i
        self.cum_f: list[int] = [0]
        self.slow: list[tuple[int, int, int]] = []  # (txn hour, known hour, fraud), sorted
        self.frauds: list[_Fraud] = []  # the fraud labels alone, in key order
        self.fraud_keys: list[tuple[int, str]] = []  # their keys (bisected by hour · HOUR_MS)

    def add(self, key: tuple[int, str], khour: int, fraud: int,
            entry: _Fraud | None = None) -> None:
        thour = key[0] // HOUR_MS
        if entry is not None:
            i = bisect_left(self.fraud_keys, key)
            self.frauds.insert(i, entry)
            self.fraud_keys.insert(i, key)
        if khour > thour + _PROMPT:
            insort(self.slow, (thour, khour, fraud))
        if not self.order or key > self.order[-1]:
            self.order.append(key)
            self.hours.append(thour)
            self.known.append(khour)
            self.fraud.append(fraud)
            self.cum_n.append(self.cum_n[-1] + 1)
            self.cum_f.append(self.cum_f[-1] + fraud)
            return
        i = bisect_left(self.order, key)
        self.order.insert(i, key)
        self.hours.insert(i, thour)
        self.known.insert(i, khour)
        self.fraud.insert(i, fraud)
        self._rebuild(i)

    def _rebuild(self, start: int) -> None:
        n, f = self.cum_n[start], self.cum_f[start]
        del self.cum_n[start + 1:], self.cum_f[start + 1:]
        for y in self.fraud[start:]:
            n += 1
            f += y
            self.cum_n.append(n)
            self.cum_f.append(f)

    def drop_before(self, hour: int) -> None:
        i = bisect_left(self.hours, hour)
        if i:
            del self.order[:i], self.hours[:i], self.known[:i], self.fraud[:i]
            self.cum_n = [0]
            self.cum_f = [0]
            self._rebuild(0)
            self.slow = [x for x in self.slow if x[0] >= hour]
        i = bisect_left(self.fraud_keys, (hour * HOUR_MS,))
        if i:
            del self.frauds[:i], self.fraud_keys[:i]

    def counts(self, hour: int, eff: int) -> list[tuple[int, int, int, int, int, int]]:
        out = []
        for w, (n, delay) in enumerate(_WINDOWS):
            lo, hi = hour - delay - n, hour - delay
            i, j = bisect_left(self.hours, lo), bisect_left(self.hours, hi)
            labelled = self.cum_n[j] - self.cum_n[i]
            frauds = self.cum_f[j] - self.cum_f[i]
            if eff >= hi + _PROMPT - 1:  # every prompt label in the window is known
                slow = self.slow
                for s in range(bisect_left(slow, (lo,)), bisect_left(slow, (hi,))):
                    _, kh, y = slow[s]
                    if kh > eff:
                        labelled -= 1
                        frauds -= y
            else:  # a cut inside the window's reach: check each label (rare)
                for k in range(i, j):
                    if self.known[k] > eff:
                        labelled -= 1
                        frauds -= self.fraud[k]
            streak, since, age = 0, n + 1, 0
            if w in _SCANNED:  # from the window's end back to its last known genuine label
                for k in range(j - 1, i - 1, -1):
                    if self.known[k] > eff:
                        continue
                    if not self.fraud[k]:
                        since = hi - self.hours[k]
                        break
                    streak += 1
                    age = hi - self.hours[k]
            unexplained = 0
            fk = self.fraud_keys
            for k in range(bisect_left(fk, (lo * HOUR_MS,)), bisect_left(fk, (hi * HOUR_MS,))):
                x = self.frauds[k]
                if x.known <= eff < x.explained:
                    unexplained += 1
            out.append((labelled, frauds, streak, since, age, unexplained))
        return out


class MerchantBook:
    """The online evaluator: labels folded as they are read, vectors looked up per transaction.

    Per merchant its labels ordered by transaction hour with prefix counts, so a window is two
    bisects; a vector is cached per (merchant, hour, effective cut hour) until a label of that
    merchant arrives. `horizon_hours`: labels whose transaction hour is that far behind the
    newest hour asked about are let go (None: keep everything, as offline).
    """

    __slots__ = ("_by_merchant", "_by_card", "_cache", "_seen", "_newest", "_evicted_day",
                 "_horizon", "labels")

    def __init__(self, *, horizon_hours: int | None = None) -> None:
        self._by_merchant: dict[str, _Labels] = {}
        #: per card its fraud labels in key order (the explanations: module docstring)
        self._by_card: dict[str, list[_Fraud]] = {}
        self._cache: dict[str, dict[tuple[int, int], tuple[FeatureValue, ...]]] = {}
        self._seen: dict[int, set[str]] = {}  # txn day → label ids (let go with the day)
        self._newest = -(2**62)
        self._evicted_day = -(2**62)
        self._horizon = horizon_hours
        #: labels folded (usable, first of their id)
        self.labels = 0

    def add(self, rec: LabelRecord) -> bool:
        """Fold one label; False when it cannot count (no merchant or time, seen, too old)."""
        if rec.merchant_id is None or rec.txn_ts_ms is None:
            return False
        thour = hour_of(rec.txn_ts_ms)
        if self._horizon is not None and thour < self._newest - self._horizon:
            if (rec.label == 1 and rec.card_id is not None
                    and thour >= self._newest - self._horizon - _EXPLAIN_HOURS):
                # too old to count, not to explain the card's frauds after it
                self._explain(rec.card_id, _Fraud((rec.txn_ts_ms, rec.label_id),
                                                  known_hour(rec.reported_at_ms), NEVER,
                                                  rec.merchant_id))
            return False  # can no longer count for any transaction still to be scored
        seen = self._seen.setdefault(thour // 24, set())
        if rec.label_id in seen:
            return False
        seen.add(rec.label_id)
        labels = self._by_merchant.get(rec.merchant_id)
        if labels is None:
            labels = self._by_merchant[rec.merchant_id] = _Labels()
        key, khour = (rec.txn_ts_ms, rec.label_id), known_hour(rec.reported_at_ms)
        entry = None
        if rec.label == 1:
            entry = _Fraud(key, khour, NEVER, rec.merchant_id)
            if rec.card_id is not None:
                self._explain(rec.card_id, entry)
        labels.add(key, khour, rec.label, entry)
        self._cache.pop(rec.merchant_id, None)
        self.labels += 1
        return True

    def _explain(self, card: str, entry: _Fraud) -> None:
        """File a new fraud label under its card: the card's frauds of the EXPLAIN_MS before it
        explain it, and it explains those of the EXPLAIN_MS after it from its known hour."""
        frauds = self._by_card.get(card)
        if frauds is None:
            self._by_card[card] = [entry]
            return
        t = entry.key[0]
        keys = [f.key for f in frauds]
        lo = bisect_left(keys, (t - EXPLAIN_MS,))
        at = bisect_left(keys, (t,))
        for f in frauds[lo:at]:
            entry.explained = min(entry.explained, f.known)
        for f in frauds[bisect_left(keys, (t + 1,)):bisect_left(keys, (t + EXPLAIN_MS + 1,))]:
            if entry.known < f.explained:
                f.explained = entry.known
                self._cache.pop(f.merchant, None)
        frauds.insert(bisect_left(keys, entry.key), entry)

    def vector(self, merchant_id: str, ts_ms: int,
               cut_ms: int = NO_CUT) -> tuple[FeatureValue, ...]:
        """The merchant features (MERCHANT_FEATURE_NAMES order) of a transaction at `ts_ms`."""
        hour = ts_ms // HOUR_MS
        if hour > self._newest:
            self._advance(hour)
        labels = self._by_merchant.get(merchant_id)
        if labels is None:
            return EMPTY
        eff = min(hour, cut_ms // HOUR_MS)
        cached = self._cache.get(merchant_id)
        if cached is None:
            cached = self._cache[merchant_id] = {}
        key = (hour, eff)
        got = cached.get(key)
        if got is None:
            got = cached[key] = _vector(labels.counts(hour, eff))
        return got

    def _advance(self, hour: int) -> None:
        self._newest = hour
        self._cache.clear()  # a new hour: earlier vectors are asked for again only rarely
        if self._horizon is None or hour // 24 == self._evicted_day:
            return  # let go of old labels once a day
        self._evicted_day = hour // 24
        floor = hour - self._horizon
        for day in [d for d in self._seen if d < floor // 24]:
            del self._seen[day]
        for m in list(self._by_merchant):
            labels = self._by_merchant[m]
            labels.drop_before(floor)
            if not labels.hours:
                del self._by_merchant[m]
        # a fraud label explains the card's labels of the EXPLAIN_MS after it: keep it that long
        oldest = (floor - _EXPLAIN_HOURS) * HOUR_MS
        for card in list(self._by_card):
            frauds = self._by_card[card]
            while frauds and frauds[0].key[0] < oldest:
                del frauds[0]
            if not frauds:
                del self._by_card[card]


@dataclass(frozen=True, slots=True)
class _Sequence:
    """Every label in (merchant code, transaction time, label_id) order, for the order-dependent
    aggregates: the fraud run ending at each label, its last genuine label, slow labels."""

    key: np.ndarray  # (code, transaction hour), non-decreasing
    hours: np.ndarray
    known: np.ndarray
    fraud: np.ndarray
    run: np.ndarray  # fraud labels in a row ending here (within the merchant)
    last_genuine: np.ndarray  # index of the last genuine label at or before here, -1: none
    slow_before: np.ndarray  # slow labels (known later than the delay) before index i


@dataclass(frozen=True, slots=True)
class MerchantTable:
    """The offline evaluator over a whole label log (full knowledge: no cut).

    Counts: each label adds +1 (and +label) to its merchant's counts on the hours it counts
    for, [max(hour(t) + D + 1, known), hour(t) + D + n], as a +/− pair; a query (merchant,
    hour) is the prefix sum of its merchant's pairs up to that hour, one searchsorted.
    Streak and hours since genuine: the labels in merchant and time order, the fraud run and
    last genuine label at each; a window is two searchsorted, and only a window holding a label
    reported later than the delay is walked label by label.
    """

    codes: dict[str, int]
    keys: tuple[np.ndarray, ...]  # per window: sorted int64 keys (merchant code, hour)
    labelled: tuple[np.ndarray, ...]  # per window: prefix sums in key order
    frauds: tuple[np.ndarray, ...]
    sequence: _Sequence
    unexplained_keys: tuple[np.ndarray, ...]  # per window, as keys, for the unexplained
    unexplained: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, records: Iterable[LabelRecord]) -> MerchantTable:
        codes: dict[str, int] = {}
        seen: set[str] = set()
        rows: list[tuple[int, int, str, int, int]] = []
        cards: list[str | None] = []
        for rec in records:
            if rec.merchant_id is None or rec.txn_ts_ms is None or rec.label_id in seen:
                continue
            seen.add(rec.label_id)
            rows.append((codes.setdefault(rec.merchant_id, len(codes)), rec.txn_ts_ms,
                         rec.label_id, rec.reported_at_ms // HOUR_MS + 1, rec.label))
            cards.append(rec.card_id)
        explained = _explained(rows, cards)
        order = sorted(range(len(rows)), key=lambda i: (rows[i][0], rows[i][1], rows[i][2]))
        rows = [rows[i] for i in order]
        m = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        t = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)) // HOUR_MS
        k = np.fromiter((r[3] for r in rows), dtype=np.int64, count=len(rows))
        y = np.fromiter((r[4] for r in rows), dtype=np.int64, count=len(rows))
        e = np.fromiter((explained[i] for i in order), dtype=np.int64, count=len(rows))
        keys, labelled, frauds, ukeys, unexplained = [], [], [], [], []
        for n, delay in _WINDOWS:
            lo = np.maximum(t + delay + 1, k)
            hi = t + delay + n
            ok = lo <= hi
            key, (cum_n, cum_f) = _pairs(m[ok], lo[ok], hi[ok],
                                         np.ones(int(ok.sum()), dtype=np.int64), y[ok])
            keys.append(key)
            labelled.append(cum_n)
            frauds.append(cum_f)
            # a fraud label is unexplained from its known hour to the hour before its card
            # explains it
            hi = np.minimum(hi, e - 1)
            ok = (lo <= hi) & (y == 1)
            key, (cum_u,) = _pairs(m[ok], lo[ok], hi[ok], np.ones(int(ok.sum()), dtype=np.int64))
            ukeys.append(key)
            unexplained.append(cum_u)
        return cls(codes, tuple(keys), tuple(labelled), tuple(frauds), _sequence(m, t, k, y),
                   tuple(ukeys), tuple(unexplained))

    def columns(self, merchant_ids: Sequence[str], ts_ms: np.ndarray) -> list[np.ndarray]:
        """The merchant feature columns (MERCHANT_FEATURE_NAMES order) for n transactions."""
        if not self.codes:  # no label names a merchant: every row as without labels
            return [np.full(len(merchant_ids), v, dtype=np.float64 if type(v) is float
                            else np.int64) for v in EMPTY]
        get = self.codes.get
        code = np.fromiter((get(x, -1) for x in merchant_ids), dtype=np.int64,
                           count=len(merchant_ids))
        hour = np.asarray(ts_ms, dtype=np.int64) // HOUR_MS
        known = code >= 0
        qkey = _key(np.where(known, code, 0), hour)
        zero = np.zeros(len(code), dtype=np.int64)
        per_window = []
        for w, (n, delay) in enumerate(_WINDOWS):
            keys = self.keys[w]
            lab = fr = zero
            if len(keys):
                idx = np.searchsorted(keys, qkey, side="right") - 1
                hit = known & (idx >= 0)
                safe = np.where(hit, idx, 0)
                lab = np.where(hit, self.labelled[w][safe], 0)
                fr = np.where(hit, self.frauds[w][safe], 0)
            un = zero
            ukeys = self.unexplained_keys[w]
            if len(ukeys):
                idx = np.searchsorted(ukeys, qkey, side="right") - 1
                hit = known & (idx >= 0)
                un = np.where(hit, self.unexplained[w][np.where(hit, idx, 0)], 0)
            streak, since, age = zero, np.full(len(code), n + 1, dtype=np.int64), zero
            if w in _SCANNED:
                streak, since, age = self._scan(code, hour, n, delay)
            per_window.append((lab, fr, streak, since, age, un))
        out: list[np.ndarray] = []
        for w, agg in _PICK:
            lab, fr, streak, since, age, un = per_window[w]
            if agg == "unexplained":
                out.append(un.astype(np.int64))
            elif agg == "labelled":
                out.append(lab.astype(np.int64))
            elif agg == "frauds":
                out.append(fr.astype(np.int64))
            elif agg == "fraud_share":
                share = np.zeros(len(lab), dtype=np.float64)
                nz = lab > 0
                share[nz] = fr[nz].astype(np.float64) / lab[nz].astype(np.float64)
                out.append(share)
            elif agg == "fraud_streak":
                out.append(streak)
            elif agg == "hours_since_genuine":
                out.append(since)
            else:
                out.append(age)
        return out

    def _scan(self, code: np.ndarray, hour: np.ndarray, n: int,
              delay: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        seq = self.sequence
        hi_h = hour - delay
        i = np.searchsorted(seq.key, _key(code, hi_h - n), side="left")
        j = np.searchsorted(seq.key, _key(code, hi_h), side="left")
        i = np.where(code >= 0, i, 0)
        j = np.where(code >= 0, j, 0)
        some = j > i
        last = np.where(some, j - 1, 0)
        streak = np.where(some, np.minimum(seq.run[last] if len(seq.run) else 0, j - i), 0)
        g = seq.last_genuine[last] if len(seq.run) else np.full(len(code), -1)
        has_g = some & (g >= i)
        since = np.where(has_g, hi_h - (seq.hours[np.where(has_g, g, 0)] if len(seq.run)
                                        else 0), n + 1)
        first = np.where(streak > 0, last - streak + 1, 0)
        age = np.where(streak > 0, hi_h - (seq.hours[first] if len(seq.run) else 0), 0)
        # a window holding a slow label may hold one not known yet: walk those windows
        walk = np.flatnonzero(some & (seq.slow_before[j] - seq.slow_before[i] > 0)) \
            if len(seq.run) else np.empty(0, dtype=np.int64)
        for q in walk.tolist():
            st, sn, ag = 0, n + 1, 0
            for x in range(int(j[q]) - 1, int(i[q]) - 1, -1):
                if seq.known[x] > hour[q]:
                    continue
                if not seq.fraud[x]:
                    sn = int(hi_h[q] - seq.hours[x])
                    break
                st += 1
                ag = int(hi_h[q] - seq.hours[x])
            streak[q], since[q], age[q] = st, sn, ag
        return streak.astype(np.int64), since.astype(np.int64), age.astype(np.int64)


def _pairs(m: np.ndarray, lo: np.ndarray, hi: np.ndarray,
           *weights: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Each row adds its weights to the hours [lo, hi] of its merchant: the sorted +/− event
    keys and, per weight, the prefix sums in key order (a query is one searchsorted)."""
    ev_key = np.concatenate([_key(m, lo), _key(m, hi + 1)])
    order = np.argsort(ev_key, kind="stable")
    return ev_key[order], tuple(np.cumsum(np.concatenate([w, -w])[order]) for w in weights)


def _explained(rows: Sequence[tuple[int, int, str, int, int]],
               cards: Sequence[str | None]) -> list[int]:
    """Per row, the hour its card explains it from (module docstring), NEVER when nothing does
    (and for genuine labels)."""
    out = [NEVER] * len(rows)
    by_card: dict[str, list[int]] = {}
    for i, (row, card) in enumerate(zip(rows, cards, strict=True)):
        if row[4] == 1 and card is not None:
            by_card.setdefault(card, []).append(i)
    for idx in by_card.values():
        idx.sort(key=lambda i: (rows[i][1], rows[i][2]))
        times = [rows[i][1] for i in idx]
        for a, i in enumerate(idx):
            t = times[a]
            lo = bisect_left(times, t - EXPLAIN_MS)
            at = bisect_left(times, t)
            if at > lo:
                out[i] = min(rows[j][3] for j in idx[lo:at])
    return out


def _sequence(m: np.ndarray, t: np.ndarray, k: np.ndarray, y: np.ndarray) -> _Sequence:
    """The labels (already in merchant and time order) with their runs and last genuine."""
    size = len(m)
    new_merchant = np.ones(size, dtype=bool)
    new_merchant[1:] = m[1:] != m[:-1]
    idx = np.arange(size, dtype=np.int64)
    # the fraud run: distance to the last reset (a genuine label or a new merchant's start)
    reset = (y == 0) | new_merchant
    last_reset = np.maximum.accumulate(np.where(reset, idx, -1)) if size else idx
    run = np.where(y == 1, idx - last_reset + np.where(new_merchant[last_reset]
                                                       & (y[last_reset] == 1), 1, 0), 0) \
        if size else idx
    start = np.maximum.accumulate(np.where(new_merchant, idx, 0)) if size else idx
    genuine = np.maximum.accumulate(np.where(y == 0, idx, -1)) if size else idx
    last_genuine = np.where(genuine >= start, genuine, -1)
    slow = (k > t + _PROMPT).astype(np.int64)
    slow_before = np.concatenate([[0], np.cumsum(slow)])
    return _Sequence(_key(m, t), t, k, y, run.astype(np.int64), last_genuine, slow_before)


#: The key packs (merchant code, hour): hours since 1970 fit in 32 bits for 490,000 years.
_HOUR_BITS: Final = 32


def _key(code: np.ndarray, hour: np.ndarray) -> np.ndarray:
    return (code.astype(np.int64) << _HOUR_BITS) | (hour.astype(np.int64) + (1 << 31))
