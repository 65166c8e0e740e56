"""Feature vectors: the integer primitives the declaration needs and the one pure derivation."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Final

import numpy as np

from app.features.declaration import CARD_FEATURES, Feature, FeatureValue

FeatureVector = tuple[FeatureValue, ...]


def mean(total: int, count: int) -> float:
    """The mean of `count` integer amounts summing to `total`.

    Python's int / int is correctly rounded, so every path that calls this gets the same bits;
    never let a path convert to float (or numpy) before dividing.
    """
    return total / count


def ratio(amount: int, mean_value: float) -> float:
    """amount / mean, as declared for `ratio_to_mean` (amount is exact in a double: < 2**53)."""
    return amount / mean_value


@dataclass(frozen=True, slots=True)
class Layout:
    """Which integer primitives are kept per scored event, derived from the declaration.

    Per window i (ascending length): count at 3i, sum at 3i+1, max at 3i+2; then one slot per
    (field, window) distinct count, then one per since_prev window, then one per outliers
    count (window, reference window, factor num, factor den). Every declared feature is a
    primitive or a pure function of primitives and the event's own amount.
    """

    windows: tuple[int, ...]
    distinct: tuple[tuple[str, int], ...]
    since: tuple[int, ...]
    signature: int
    outliers: tuple[tuple[int, int, int, int], ...]

    @property
    def width(self) -> int:
        """Integers per event."""
        return 3 * len(self.windows) + len(self.distinct) + len(self.since) + len(self.outliers)

    @property
    def distinct_fields(self) -> tuple[str, ...]:
        """Source fields whose values the state must keep (first-use order)."""
        return tuple(dict.fromkeys(f for f, _ in self.distinct))


def build_layout(features: Sequence[Feature]) -> Layout:
    """The primitive layout for `features`."""
    windows = tuple(sorted({f.window.ms for f in features}
                           | {f.reference.ms for f in features if f.reference is not None}))
    index = {ms: i for i, ms in enumerate(windows)}
    distinct = tuple(dict.fromkeys(
        (f.source, index[f.window.ms]) for f in features if f.aggregate == "distinct"))
    since = tuple(dict.fromkeys(
        index[f.window.ms] for f in features if f.aggregate == "since_prev"))
    outliers = tuple(dict.fromkeys(_outlier_key(f, index) for f in features
                                   if f.aggregate == "outliers"))
    # the signature text of a layout without outliers is what it was before they existed
    text = repr((windows, distinct, since, *((outliers,) if outliers else ()))).encode()
    return Layout(windows, distinct, since, zlib.crc32(text), outliers)


def _outlier_key(f: Feature, index: dict[int, int]) -> tuple[int, int, int, int]:
    assert f.factor is not None and f.reference is not None
    return (index[f.window.ms], index[f.reference.ms], *f.factor)


def _plan(features: Sequence[Feature], layout: Layout) -> tuple[tuple[int, ...], tuple[int, ...],
                                                                 tuple[int, ...]]:
    """(mean slots, ratio-to-mean slots, pick order) turning primitives into the vector.

    `derive` extends the primitives with one mean per mean slot and one ratio per ratio slot,
    then picks, per feature, its position in that extended list.
    """
    index = {ms: i for i, ms in enumerate(layout.windows)}
    base = 3 * len(layout.windows)
    means = tuple(dict.fromkeys(
        3 * index[f.window.ms] for f in features if f.aggregate in ("mean", "ratio_to_mean")))
    ratios = tuple(dict.fromkeys(
        means.index(3 * index[f.window.ms]) for f in features if f.aggregate == "ratio_to_mean"))
    pick: list[int] = []
    for f in features:
        w = index[f.window.ms]
        if f.aggregate in ("count", "sum", "max"):
            pick.append(3 * w + ("count", "sum", "max").index(f.aggregate))
        elif f.aggregate == "mean":
            pick.append(layout.width + means.index(3 * w))
        elif f.aggregate == "ratio_to_mean":
            pick.append(layout.width + len(means) + ratios.index(means.index(3 * w)))
        elif f.aggregate == "distinct":
            pick.append(base + layout.distinct.index((f.source, w)))
        elif f.aggregate == "outliers":
            pick.append(base + len(layout.distinct) + len(layout.since)
                        + layout.outliers.index(_outlier_key(f, index)))
        else:
            pick.append(base + len(layout.distinct) + layout.since.index(w))
    return means, ratios, tuple(pick)


LAYOUT: Final[Layout] = build_layout(CARD_FEATURES)
_MEANS, _RATIOS, _PICK_ORDER = _plan(CARD_FEATURES, LAYOUT)
_pick = itemgetter(*_PICK_ORDER)  # two or more features: itemgetter returns a tuple
#: How `derive` builds the vector (mean slots, ratio → mean, pick order): the compiled card
#: state (app/features/_state.c) follows the same plan where its operands are exact doubles.
DERIVE_PLAN: Final = (_MEANS, _RATIOS, _PICK_ORDER)


def derive(primitives: Sequence[int], amount: int) -> FeatureVector:
    """The card part of the served vector (CARD_FEATURE_NAMES order) from an event's
    primitives and amount.

    The single function both evaluators use, so derived floats agree bit for bit.
    """
    means = [mean(primitives[slot + 1], primitives[slot]) for slot in _MEANS]
    ratios = [ratio(amount, means[k]) for k in _RATIOS]
    return _pick([*primitives, *means, *ratios])


#: Sums above this are not exact in a double: their means are divided as Python ints.
_EXACT: Final = 2**53


def derive_columns(prims: np.ndarray, amounts: np.ndarray) -> list[np.ndarray]:
    """`derive` over n events at once: prims is LAYOUT.width x n int64, amounts n int64.

    Returns one column per card feature (CARD_FEATURE_NAMES order), int64 or float64, bit for bit what
    `derive` gives row by row: a mean is one IEEE division of two doubles, which is Python's
    correctly rounded int / int whenever both ints are exact doubles (< 2**53); rows whose sum
    is not are divided in Python. The ratio is float(amount) / mean in both.
    """
    means = []
    for slot in _MEANS:
        total, count = prims[slot + 1], prims[slot]
        m = total.astype(np.float64) / count.astype(np.float64)
        big = np.flatnonzero(total > _EXACT)
        if big.size:
            m[big] = [mean(int(total[k]), int(count[k])) for k in big]
        means.append(m)
    ratios = [amounts.astype(np.float64) / means[k] for k in _RATIOS]
    extended = [prims[i] for i in range(LAYOUT.width)] + means + ratios
    return [extended[i] for i in _PICK_ORDER]
