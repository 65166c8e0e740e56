"""Live drift of one model: every served row's features and score counted into the model's
reference bins over the 1 h and 24 h event-time windows, and PSI against the reference.

Used unchanged by the worker (one `observe` per scored batch) and offline (`drift_of_log`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from app.drift.psi import psi
from app.drift.window import SlotWindow
from app.scoring.drift_reference import SCORE, DriftReference


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """A drift window: `slots` slots of `slot_ms` each (its length is their product)."""

    name: str
    slot_ms: int
    slots: int


#: Rows held before they are counted: the counting's fixed cost per call (~100 µs) is paid once
#: per this many rows, not per micro-batch (live batches are ~10 rows). A window's counts do
#: not depend on how its rows were batched (app.drift.window), so holding them changes nothing
#: a reader sees: `state` counts what is held first.
FLUSH_ROWS: Final = 4096
#: 1 h to the minute and 24 h to the quarter hour.
WINDOWS: Final = (WindowSpec("1h", 60_000, 60), WindowSpec("24h", 900_000, 96))


@dataclass(frozen=True, slots=True)
class WindowDrift:
    """One window's state: events counted, counts per series and bin, PSI per series."""

    window: str
    events: int
    counts: dict[str, list[int]]
    psi: dict[str, float]  # NaN below the minimum number of events


class DriftMonitor:
    """Counts of one model's served rows in its reference bins, per event-time window."""

    def __init__(self, reference: DriftReference, version: str, *,
                 windows: Sequence[WindowSpec] = WINDOWS, min_events: int = 1) -> None:
        self.reference = reference
        self.version = version
        self.min_events = min_events
        series = reference.series
        self.names = tuple(name for name, _ in series)
        self._bins = [bins for _, bins in series]
        self._width = max(b.size for b in self._bins)
        # every series' edges padded to one width with +inf (no finite value reaches it): a
        # batch is binned by one comparison, bin = number of edges <= value (as searchsorted
        # with side="right")
        edges = np.full((len(series), self._width - 1), np.inf)
        for j, bins in enumerate(self._bins):
            edges[j, : len(bins.edges)] = bins.edges
        self._edges = edges
        self._count_dtype = np.uint8 if self._width <= 256 else np.int64
        # cell of (series j, bin b) = j * width + b
        self._offsets = np.arange(len(series), dtype=np.int64) * self._width
        self.windows = {w.name: SlotWindow(name=w.name, slot_ms=w.slot_ms, slots=w.slots,
                                           cells=len(series) * self._width) for w in windows}
        self._held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._held_rows = 0
        # the worker counts on its event loop; a Prometheus listener of its own
        # (--metrics-listen) reads the state from another thread: one at a time
        self._lock = threading.RLock()

    def observe(self, matrix: np.ndarray, scores: np.ndarray, ts_ms: np.ndarray) -> None:
        """Count rows: model inputs float32 [N, F], their scores [N], event times int64 [N]
        (held, then counted with others: see FLUSH_ROWS)."""
        n = len(ts_ms)
        if n == 0:
            return
        with self._lock:
            self._held.append((matrix, scores, ts_ms))
            self._held_rows += n
            if self._held_rows >= FLUSH_ROWS:
                self._flush()

    def flush(self) -> None:
        """Count every held row now."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if not self._held:
            return
        held, self._held, self._held_rows = self._held, [], 0
        if len(held) == 1:
            matrix, scores, ts_ms = held[0]
        else:
            matrix = np.concatenate([h[0] for h in held])
            scores = np.concatenate([h[1] for h in held])
            ts_ms = np.concatenate([h[2] for h in held])
        values = np.empty((len(ts_ms), len(self._bins)), dtype=np.float64)
        values[:, :-1] = matrix
        values[:, -1] = scores
        # one pass per edge column, counted in small ints: a [rows, series, edges] comparison
        # and its sum took 3x as long (3 % of a live worker's loop at 16k ev/s)
        counted = np.zeros(values.shape, dtype=self._count_dtype)
        above = np.empty(values.shape, dtype=bool)
        as_count = above.view(np.uint8)  # a bool is one byte, 0 or 1: added without a cast
        for k in range(self._edges.shape[1]):
            np.greater_equal(values, self._edges[:, k], out=above)
            np.add(counted, as_count, out=counted, casting="unsafe")
        cells = counted.astype(np.int64)
        cells += self._offsets
        for window in self.windows.values():
            window.add(ts_ms, cells)

    def state(self, window: str) -> WindowDrift:
        """Counts and PSI of every series over `window`."""
        with self._lock:
            self._flush()
            flat = self.windows[window].counts()
        counts: dict[str, list[int]] = {}
        values: dict[str, float] = {}
        for j, (name, bins) in enumerate(zip(self.names, self._bins, strict=True)):
            row = flat[j * self._width: j * self._width + bins.size].tolist()
            counts[name] = row
        events = sum(counts[self.names[0]])
        for name, bins in zip(self.names, self._bins, strict=True):
            values[name] = (psi(bins.counts, counts[name]) if events >= self.min_events
                            else float("nan"))
        return WindowDrift(window, events, counts, values)

    @property
    def score_name(self) -> str:
        return SCORE
