"""The population stability index of binned counts against a reference (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Literal

#: Added to every bin's count on both sides before taking shares, so an empty bin costs a
#: bounded amount instead of an infinite log (the same on every path: online == offline).
SMOOTHING: Final = 0.5

Level = Literal["ok", "watch", "alert", "n/a"]


def psi(expected: Sequence[float], actual: Sequence[float]) -> float:
    """Σ (a_i − e_i)·ln(a_i / e_i) over the bins' smoothed shares; NaN when `actual` is empty.

    Summed in bin order with Python floats, so the same counts give the same float anywhere.
    """
    if len(expected) != len(actual):
        raise ValueError(f"{len(expected)} reference bins, {len(actual)} counted")
    n_a = float(sum(actual))
    if n_a <= 0:
        return math.nan
    k = len(expected)
    tot_e = float(sum(expected)) + SMOOTHING * k
    tot_a = n_a + SMOOTHING * k
    total = 0.0
    for e, a in zip(expected, actual, strict=True):
        pe = (e + SMOOTHING) / tot_e
        pa = (a + SMOOTHING) / tot_a
        total += (pa - pe) * math.log(pa / pe)
    return total


def level(value: float, *, watch: float, alert: float) -> Level:
    """Where a PSI stands against the thresholds (NaN: too few events to say)."""
    if math.isnan(value):
        return "n/a"
    if value >= alert:
        return "alert"
    return "watch" if value >= watch else "ok"
