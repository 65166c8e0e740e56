"""One card's online feature state: exact sliding windows, lateness, redelivery, compact bytes.

What is kept, and why redelivery stays exact after eviction
------------------------------------------------------------
The state holds the card's accepted events with ts ≥ max_ts − (max W + L), sorted by
(ts, arrival). Nothing older can ever count again: a new event that is not late has
τ ≥ max_ts − L, so its widest window starts after max_ts − max W − L.

A redelivered event must be scored with exactly the features it had the first time. A
rescan of the buffer is NOT exact: an event e stays buffered while ts(e) ≥ cutoff, but the
events that counted for e only had ts > ts(e) − max W, and those below the cutoff are gone
(e at 24h counted an event at 1 ms; once max_ts passes 48h + L − 1 that event is evicted
while e is still remembered). Keeping the buffer twice as long would fix that at double the
size and an O(n) rescan per redelivery. Instead each buffered event carries its integer
primitives (vector.LAYOUT: per window count/sum/max, the distinct counts, ms_since_prev,
the outliers counts; 23 int64 here, 184 bytes). A redelivery looks them up by txn_id and
re-derives the floats with the same pure `vector.derive`, so the vector is bit-for-bit the
first one, whatever was accepted since. A txn_id is forgotten exactly when its event is
evicted; such a redelivery is then late by the normal rule (ts < max_ts − max W − L < max_ts − L).

Cost: an in-order event (ts ≥ max_ts) is O(1) amortized: per window a running sum, a start
pointer advanced as τ moves, a monotonic deque for the max, and per distinct feature a
value → count map; only an outliers count scans its window's events (its bar is the event's
own reference mean). An out-of-order event (within L) scans the buffer for its features
(C-speed slices and bisects), is inserted in ts order (O(n) memmove) and patches the running
aggregates (O(deque)); a redelivery finds its event by a linear search. Evicted slots are
compacted lazily (amortized O(1)).

Bytes (`to_bytes`): format byte, layout signature (crc32 of the declaration's primitive
layout: a state written under another declaration is refused), max_ts, the buffer as
little-endian arrays (ts and amount int64; the primitives one column per primitive, each
column in the narrowest of 1/2/4/8-byte signed integers that holds all its values, the widths
in a byte each before the arrays), the max deques, and txn_id / merchant / country strings
joined by NUL (the contract's id alphabet has no NUL; apply refuses one). Running sums,
pointers and distinct counts are recomputed on load (C-speed slices). Format 1 (the
primitives event by event, all int64: 184 bytes an event where format 2 takes about 60; a
card record is written to the store and the changelog on every change) is still read.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable
from functools import lru_cache
from operator import attrgetter
from typing import Any, Final

from app.features.outcome import Accepted, Late, Outcome, Redelivered
from app.features.vector import DERIVE_PLAN, LAYOUT, FeatureVector, derive
from app.transactions.contract import Transaction

__all__ = ["FORMAT_VERSION", "Accepted", "CardState", "Late", "Outcome", "Redelivered"]

FORMAT_VERSION: Final = 2
#: Formats from_bytes reads: 1 (primitives all int64, event-major) and this one.
READ_VERSIONS: Final = (1, FORMAT_VERSION)
_HEADER: Final = struct.Struct("<BIqI")  # version, layout signature, max_ts, events
_WINDOWS: Final = LAYOUT.windows
_NW: Final = len(_WINDOWS)
_MAX_W: Final = _WINDOWS[-1]
_WIDTH: Final = LAYOUT.width
_FIELDS: Final = LAYOUT.distinct_fields
#: (index into _FIELDS, window index) per distinct feature.
_DISTINCT: Final = tuple((_FIELDS.index(f), w) for f, w in LAYOUT.distinct)
_DISTINCT_BY_WINDOW: Final = tuple(
    tuple((j, fi) for j, (fi, w) in enumerate(_DISTINCT) if w == i) for i in range(_NW))
#: (window index, length, distinct features leaving with it) in primitive order.
_WINDOW_PLAN: Final = tuple((i, w, _DISTINCT_BY_WINDOW[i]) for i, w in enumerate(_WINDOWS))
_DISTINCT_FIELDS: Final = tuple((j, fi) for j, (fi, _) in enumerate(_DISTINCT))
_SINCE_WINDOWS: Final = tuple(_WINDOWS[wi] for wi in LAYOUT.since)
#: (window index, count slot, sum slot of the reference window, num, den) per outliers count.
_OUTLIERS: Final = tuple((wi, 3 * ri, 3 * ri + 1, num, den)
                         for wi, ri, num, den in LAYOUT.outliers)
_DBASE: Final = 3 * _NW
_SBASE: Final = _DBASE + len(_DISTINCT)
_OBASE: Final = _SBASE + len(LAYOUT.since)
_LENGTHS: Final = struct.Struct(f"<{_NW}I{1 + len(_FIELDS)}I")
#: Evicted head slots are dropped (with the strings they hold) once they are at least half the
#: buffer and at least this many: a card holds at most about twice its live events. At 64, a
#: card with fewer than 64 events in its whole life never compacted, so it kept every event it
#: ever had (the overload bench's RSS grew ~170-280 bytes per event served, with the events in
#: the windows flat).
_COMPACT_MIN: Final = 1
_SEP: Final = "\x00"
_getter = attrgetter(*_FIELDS)


def _field_values(txn: Transaction) -> tuple[str, ...]:
    got = _getter(txn)
    return got if len(_FIELDS) > 1 else (got,)


def _outliers(amounts: array, lo: int, hi: int, scale: int, bar: int) -> int:
    """How many of amounts[lo:hi] have amount · scale > bar (exact: Python ints)."""
    return sum(1 for x in amounts[lo:hi] if x * scale > bar)


def _le(a: array) -> bytes:
    if sys.byteorder != "little":  # pragma: no cover - the format is little-endian
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


@lru_cache(maxsize=256)
def _pairs(n: int) -> struct.Struct:
    """Little-endian int64 pairs: a max deque of n (ts, amount) entries."""
    return struct.Struct(f"<{2 * n}q")


#: array typecode per primitive column width in bytes (signed).
_CODES: Final = {1: "b", 2: "h", 4: "i", 8: "q"}
assert all(array(c).itemsize == w for w, c in _CODES.items())


def _width(column: array) -> int:
    """The narrowest signed width (1, 2, 4 or 8 bytes) that holds every value of `column`."""
    if not column:
        return 1
    lo, hi = min(column), max(column)
    for w in (1, 2, 4):
        bound = 1 << (8 * w - 1)
        if -bound <= lo and hi < bound:
            return w
    return 8


def _columns(prims: array) -> tuple[bytes, bytes]:
    """The primitives' widths (a byte each) and their columns, each at its width."""
    cols = [prims[c::_WIDTH] for c in range(_WIDTH)]
    widths = [_width(col) for col in cols]
    return bytes(widths), b"".join(_le(array(_CODES[w], col)) for w, col in zip(widths, cols,
                                                                                 strict=True))


def _from_columns(raw: memoryview, widths: bytes, n: int) -> array:
    """The event-major int64 primitives from their columns (`_columns`)."""
    prims = array("q", bytes(8 * n * _WIDTH))
    off = 0
    for c, w in enumerate(widths):
        col = array(_CODES[w])
        col.frombytes(raw[off:off + w * n])
        if sys.byteorder != "little":  # pragma: no cover - the format is little-endian
            col.byteswap()
        prims[c::_WIDTH] = array("q", col)
        off += w * n
    return prims


def _from_le(raw: memoryview) -> array:
    a = array("q")
    a.frombytes(raw)
    if sys.byteorder != "little":  # pragma: no cover
        a.byteswap()
    return a


class CardState:
    """One card's mutable feature state (see the module docstring for what is kept and why)."""

    __slots__ = ("_max_ts", "_ts", "_amt", "_prims", "_vals", "_txn", "_txn_set", "_head",
                 "_start", "_sum", "_maxq", "_counts")

    def __init__(self) -> None:
        self._max_ts = 0  # meaningful only while the buffer is non-empty
        self._ts = array("q")
        self._amt = array("q")
        self._prims = array("q")
        self._vals: tuple[list[str], ...] = tuple([] for _ in _FIELDS)
        self._txn: list[str] = []
        self._txn_set: set[str] = set()
        self._head = 0
        self._start = [0] * _NW
        self._sum = [0] * _NW
        self._maxq: list[deque[tuple[int, int]]] = [deque() for _ in range(_NW)]
        self._counts: list[dict[str, int]] = [{} for _ in _DISTINCT]

    @classmethod
    def empty(cls) -> CardState:
        """The state of a card never seen."""
        return cls()

    def __len__(self) -> int:
        """Buffered (accepted, not yet evicted) events."""
        return len(self._ts) - self._head

    @property
    def max_ts(self) -> int | None:
        """Largest ts accepted so far, None for a card never seen."""
        return self._max_ts if len(self) else None

    def apply(self, txn: Transaction, *, allowed_lateness_ms: int) -> Outcome:
        """Score one transaction of this card, in the card's log order, and fold it in if new.

        A txn_id still remembered is Redelivered with its first features (whatever its
        content now); otherwise ts < max_ts − allowed_lateness_ms is Late; else Accepted.
        Neither Redelivered nor Late changes the state.
        """
        if allowed_lateness_ms < 0:
            raise ValueError(f"allowed_lateness_ms must be >= 0, got {allowed_lateness_ms}")
        tid = txn.txn_id
        if tid in self._txn_set:
            return Redelivered(self._first_features(tid))
        ts = txn.ts_ms
        live = len(self._ts) - self._head
        if live and ts < self._max_ts - allowed_lateness_ms:
            behind = self._max_ts - ts
            return Late(f"ts {ts} is {behind} ms behind the card's max_ts {self._max_ts} "
                        f"(allowed lateness {allowed_lateness_ms} ms)", behind)
        vals = _field_values(txn)
        if _SEP in tid or _SEP in "".join(vals):
            raise ValueError("ids must not contain NUL (validate with the transaction contract)")
        if not live or ts >= self._max_ts:
            prims = self._append(tid, ts, txn.amount_minor, vals, live)
        else:
            prims = self._insert(tid, ts, txn.amount_minor, vals)
        self._evict(self._max_ts - _MAX_W - allowed_lateness_ms)
        return Accepted(derive(prims, txn.amount_minor))

    # --- in-order: O(1) amortized ------------------------------------------------------------

    def _append(self, tid: str, ts: int, amt: int, vals: tuple[str, ...], live: int) -> list[int]:
        ts_arr, amt_arr, counts, allvals = self._ts, self._amt, self._counts, self._vals
        starts, sums, maxq = self._start, self._sum, self._maxq
        n = len(ts_arr)
        prims: list[int] = []
        for i, w, leaving in _WINDOW_PLAN:
            bound = ts - w
            s = starts[i]
            total = sums[i] + amt
            if s < n and ts_arr[s] <= bound:
                while s < n and ts_arr[s] <= bound:
                    total -= amt_arr[s]
                    for j, fi in leaving:
                        c = counts[j]
                        v = allvals[fi][s]
                        k = c[v] - 1
                        if k:
                            c[v] = k
                        else:
                            del c[v]
                    s += 1
                starts[i] = s
            sums[i] = total
            q = maxq[i]
            while q and q[0][0] <= bound:
                q.popleft()
            while q and q[-1][1] <= amt:
                q.pop()
            q.append((ts, amt))
            prims += (n + 1 - s, total, q[0][1])
        for j, fi in _DISTINCT_FIELDS:
            c = counts[j]
            v = vals[fi]
            c[v] = c.get(v, 0) + 1
            prims.append(len(c))
        prev = self._max_ts
        for w in _SINCE_WINDOWS:
            prims.append(ts - prev if live and prev > ts - w else -1)
        for wi, cslot, sslot, num, den in _OUTLIERS:
            # the window's other events are positions start .. n − 1 (e is not appended yet)
            prims.append(_outliers(amt_arr, starts[wi], n, den * prims[cslot],
                                   num * prims[sslot]))
        ts_arr.append(ts)
        amt_arr.append(amt)
        self._prims.extend(prims)
        for fi, v in enumerate(vals):
            allvals[fi].append(v)
        self._txn.append(tid)
        self._txn_set.add(tid)
        self._max_ts = ts
        return prims

    # --- out of order (within L): rescan --------------------------------------------------

    def _insert(self, tid: str, ts: int, amt: int, vals: tuple[str, ...]) -> list[int]:
        ts_arr, amt_arr = self._ts, self._amt
        h = self._head
        hi = bisect_right(ts_arr, ts, h)  # every buffered event with ts <= τ arrived before e
        prims = [0] * _WIDTH
        lows = [bisect_right(ts_arr, ts - w, h, hi) for w in _WINDOWS]
        for i, lo in enumerate(lows):
            part = amt_arr[lo:hi]
            prims[3 * i] = hi - lo + 1
            prims[3 * i + 1] = sum(part) + amt
            prims[3 * i + 2] = max(amt, max(part)) if part else amt
        for j, (fi, wi) in enumerate(_DISTINCT):
            seen = set(self._vals[fi][lows[wi]:hi])
            seen.add(vals[fi])
            prims[_DBASE + j] = len(seen)
        for k, wi in enumerate(LAYOUT.since):
            prims[_SBASE + k] = ts - ts_arr[hi - 1] if hi > lows[wi] else -1
        for k, (wi, cslot, sslot, num, den) in enumerate(_OUTLIERS, _OBASE):
            prims[k] = _outliers(amt_arr, lows[wi], hi, den * prims[cslot], num * prims[sslot])
        ts_arr.insert(hi, ts)
        amt_arr.insert(hi, amt)
        self._prims[hi * _WIDTH:hi * _WIDTH] = array("q", prims)
        for fi, v in enumerate(vals):
            self._vals[fi].insert(hi, v)
        self._txn.insert(hi, tid)
        self._txn_set.add(tid)
        self._fold_in_past(ts, amt, vals)
        return prims

    def _fold_in_past(self, ts: int, amt: int, vals: tuple[str, ...]) -> None:
        """Add an event with ts < max_ts to the running aggregates of the windows at max_ts."""
        for i, w, joining in _WINDOW_PLAN:
            if ts <= self._max_ts - w:
                self._start[i] += 1  # inserted before the window's first event
                continue
            self._sum[i] += amt
            for j, fi in joining:
                c = self._counts[j]
                c[vals[fi]] = c.get(vals[fi], 0) + 1
            # deque invariant: an entry stays iff larger than every later event in the window;
            # entries with ts <= τ precede the new event (it goes after equal timestamps)
            entries = list(self._maxq[i])
            k = 0
            while k < len(entries) and entries[k][0] <= ts:
                k += 1
            later = entries[k:]
            kept = [e for e in entries[:k] if e[1] > amt]
            if not later or amt > later[0][1]:
                kept.append((ts, amt))
            self._maxq[i] = deque(kept + later)

    # --- redelivery, eviction ----------------------------------------------------------------

    def recall(self, txn_id: str) -> FeatureVector | None:
        """The features `txn_id` was first served with, while it is still remembered."""
        return self._first_features(txn_id) if txn_id in self._txn_set else None

    def _first_features(self, tid: str) -> FeatureVector:
        pos = self._txn.index(tid, self._head)
        return derive(self._prims[pos * _WIDTH:(pos + 1) * _WIDTH], self._amt[pos])

    def _evict(self, cutoff: int) -> None:
        ts_arr, h, n = self._ts, self._head, len(self._ts)
        while h < n and ts_arr[h] < cutoff:
            self._txn_set.discard(self._txn[h])
            h += 1
        self._head = h
        if h >= _COMPACT_MIN and 2 * h >= n:
            self._compact()

    def _compact(self) -> None:
        h = self._head
        if not h:
            return
        del self._ts[:h]
        del self._amt[:h]
        del self._prims[:h * _WIDTH]
        for vals in self._vals:
            del vals[:h]
        del self._txn[:h]
        self._start = [s - h for s in self._start]
        self._head = 0

    # --- bytes ---------------------------------------------------------------------------------

    def to_bytes(self, prefix: bytes = b"") -> bytes:
        """The state as compact, versioned bytes (see the module docstring for the layout),
        after `prefix` when one is given (a card record's position: one copy for the record)."""
        # Called for every card a batch changes, so it is kept to a few C calls: no copies of
        # the arrays while nothing was evicted, one pack for all max deques (their pairs are
        # contiguous in the layout, so one "<2kq" pack equals the per-deque packs joined).
        h = self._head
        ts, amt, prims, txn_ids, cols = self._ts, self._amt, self._prims, self._txn, self._vals
        if h:
            ts, amt, prims, txn_ids = ts[h:], amt[h:], prims[h * _WIDTH:], txn_ids[h:]
            cols = tuple(v[h:] for v in cols)
        n = len(ts)
        txn = _SEP.join(txn_ids).encode()
        vals = [_SEP.join(v).encode() for v in cols]
        maxq = self._maxq
        pairs = [x for q in maxq for entry in q for x in entry]
        widths, columns = _columns(prims)
        return b"".join((
            prefix, _HEADER.pack(FORMAT_VERSION, LAYOUT.signature, self._max_ts if n else 0, n),
            _LENGTHS.pack(*map(len, maxq), len(txn), *map(len, vals)), widths,
            _le(ts), _le(amt), columns, _pairs(len(pairs) >> 1).pack(*pairs), txn, *vals,
        ))

    @classmethod
    def from_bytes(cls, data: bytes) -> CardState:
        """Restore a state written by `to_bytes`; raise ValueError for anything else."""
        if len(data) < _HEADER.size + _LENGTHS.size:
            raise ValueError(f"card state: {len(data)} bytes is too short")
        version, signature, max_ts, n = _HEADER.unpack_from(data)
        if version not in READ_VERSIONS:
            raise ValueError(f"card state: format {version} is not {FORMAT_VERSION}")
        if signature != LAYOUT.signature:
            raise ValueError("card state: written under another feature declaration; rebuild it")
        lengths = _LENGTHS.unpack_from(data, _HEADER.size)
        qlens, slens = lengths[:_NW], lengths[_NW:]
        off = _HEADER.size + _LENGTHS.size
        if version == 1:
            widths = bytes([8] * _WIDTH)
        else:
            widths = data[off:off + _WIDTH]
            if len(widths) < _WIDTH or any(w not in _CODES for w in widths):
                raise ValueError("card state: primitive widths are not 1, 2, 4 or 8 bytes")
            off += _WIDTH
        sizes = [8 * n, 8 * n, sum(widths) * n, *(16 * k for k in qlens), *slens]
        if off + sum(sizes) != len(data):
            raise ValueError("card state: lengths do not add up (truncated or corrupt)")
        mv = memoryview(data)
        chunks = []
        for size in sizes:
            chunks.append(mv[off:off + size])
            off += size
        self = cls()
        self._ts, self._amt = (_from_le(c) for c in chunks[:2])
        self._prims = _from_le(chunks[2]) if version == 1 else _from_columns(chunks[2], widths, n)
        strings = [bytes(c).decode().split(_SEP) if n else [] for c in chunks[3 + _NW:]]
        if any(len(s) != n for s in strings):
            raise ValueError("card state: string columns do not match the event count")
        self._txn, self._vals = strings[0], tuple(strings[1:])
        self._txn_set = set(self._txn)
        self._max_ts = max_ts
        for i, w in enumerate(_WINDOWS):
            s = bisect_right(self._ts, max_ts - w)
            self._start[i] = s
            self._sum[i] = sum(self._amt[s:])
            flat = _from_le(chunks[3 + i])
            self._maxq[i] = deque(zip(flat[0::2], flat[1::2], strict=True))
        for j, (fi, wi) in enumerate(_DISTINCT):
            self._counts[j] = Counter(self._vals[fi][self._start[wi]:])  # a dict subclass
        return self


try:
    from app.features import _state
except ImportError:  # pragma: no cover - exercised only where the extension was not built
    _state = None  # type: ignore[assignment]

if _state is not None:
    _state.configure(
        windows=_WINDOWS,
        distinct_fields=tuple(fi for fi, _ in _DISTINCT),
        distinct_windows=tuple(w for _, w in _DISTINCT),
        since_windows=LAYOUT.since,
        outliers=LAYOUT.outliers,
        fields=_FIELDS,
        signature=LAYOUT.signature,
        version=FORMAT_VERSION,
        compact_min=_COMPACT_MIN,
        accepted=Accepted,
        late=Late,
        redelivered=Redelivered,
        derive=derive,
        derive_plan=DERIVE_PLAN,
    )

#: The compiled twin of CardState (app/features/_state.c): same rules, outcomes and bytes, held
#: in C arrays; None where the extension was not built.
CompiledCardState: type[CardState] | None = _state.CardState if _state is not None else None
#: What the stream folds with: the compiled state when built, else CardState.
StreamCardState: type[CardState] = CompiledCardState or CardState


def _joined(card: tuple[Any, ...], merchant: tuple[Any, ...]) -> tuple[Any, ...]:
    return (*card, *merchant)


#: A card's feature vector followed by its merchant's, as one tuple: compiled, one the garbage
#: collector does not track (numbers only: in no cycle), one young collection fewer per ~2,000
#: events served.
joined: Callable[[tuple[Any, ...], tuple[Any, ...]], tuple[Any, ...]] = (
    _state.joined if _state is not None else _joined)
#: Feature vectors into a float32 buffer (app.scoring.scorer.features_matrix); None where the
#: extension was not built.
fill_matrix: Callable[[Any, Any], int] | None = _state.fill_matrix if _state is not None else None
