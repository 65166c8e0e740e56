"""Binned counts over a sliding window of event time, kept as a ring of time slots.

The window ends at the newest event time seen (the watermark) and covers the `slots` slots
up to and including the watermark's. An event is counted in its slot; a slot is cleared when
the watermark moves a whole window past it; an event older than the window is not counted.
The state after any sequence of `add` calls is the count of the events whose slot lies in the
final window, whatever the order or batching (each call moves the watermark first, then
counts): the workers and the offline evaluator agree by construction.
"""

from __future__ import annotations

import numpy as np


class SlotWindow:
    """Counts of `cells` bins per slot over `slots` slots of `slot_ms` event-time each."""

    def __init__(self, *, name: str, slot_ms: int, slots: int, cells: int) -> None:
        if slot_ms <= 0 or slots <= 0 or cells <= 0:
            raise ValueError("slot_ms, slots and cells must be positive")
        self.name = name
        self.slot_ms = slot_ms
        self.slots = slots
        self.cells = cells
        self._ring = np.zeros((slots, cells), dtype=np.int64)
        self._head: int | None = None  # the watermark's slot number

    @property
    def length_ms(self) -> int:
        return self.slot_ms * self.slots

    def add(self, ts_ms: np.ndarray, cells: np.ndarray) -> None:
        """Count events: `ts_ms` int64 [N] and their bins `cells` int64 [N, K] (K bins per event,
        one per series, each in [0, cells))."""
        if len(ts_ms) == 0:
            return
        slot = ts_ms // self.slot_ms
        newest = int(slot.max())
        head = self._head
        if head is None or newest > head:
            self._advance(newest)
            head = newest
        keep = slot > head - self.slots
        if not keep.all():
            slot, cells = slot[keep], cells[keep]
            if len(slot) == 0:
                return
        flat = (((slot % self.slots) * self.cells)[:, None] + cells).ravel()
        ring = self._ring.reshape(-1)  # a view: counts land in the ring
        if len(flat) * 8 < ring.size:
            # a small batch (the live case): touch only its cells, not the whole ring
            np.add.at(ring, flat, 1)
        else:
            ring += np.bincount(flat, minlength=ring.size)

    def _advance(self, newest: int) -> None:
        head = self._head
        if head is None or newest - head >= self.slots:
            self._ring[:] = 0
        else:
            for s in range(head + 1, newest + 1):
                self._ring[s % self.slots] = 0
        self._head = newest

    def counts(self) -> np.ndarray:
        """The window's counts per cell (int64 [cells])."""
        return self._ring.sum(axis=0)

    @property
    def end_ms(self) -> int | None:
        """Exclusive end of the window in event time (None before the first event)."""
        return None if self._head is None else (self._head + 1) * self.slot_ms
