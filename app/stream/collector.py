"""The worker's garbage collector: thresholds, the start-up freeze, and its pauses measured.

Every collection holds the GIL: the event loop and the consumer thread stand still for it. What
a collection costs is the number of tracked objects in the generations it scans, and a worker's
long-lived objects are its cached card states, about 18 tracked containers each. With a young
collection every 20,000 allocations and the middle generation every 20 of them, the middle one
comes every 10-20 s at 3-4k ev/s and scans every card decoded since the last: 240-370 ms
pauses, each of which alone pushes a 20-30 s step's p99 over the 50 ms budget; young collections
take up to 30-45 ms (deallocations of old objects also count down the young generation's
counter, so it holds far more than 20,000 objects). Young collections every 2,000 allocations
take ≤ 12 ms for the same total time (the collector's CPU is set by what is allocated, not by
how it is cut), and the middle generation is collected only after 10,000 of them (every 15-30
min at those rates: one pause of at most the objects alive in it, bounded by the card cache).
Full collections come after 1,000 middle ones. Everything loaded at start-up is frozen: never
scanned again.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any, Final

from app.stream import metrics

#: (young, middle, full): allocations per young collection, young collections per middle one,
#: middle ones per full one (see the module docstring for the measurements behind them).
GC_THRESHOLDS: Final = (2_000, 10_000, 1_000)


class PauseWatch:
    """A `gc.callbacks` entry: each collection's duration into fraudstream_gc_pause_seconds."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started = 0.0
        self._children = [metrics.GC_PAUSE.labels(str(g)) for g in range(3)]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        # collections never nest (the collector holds the GIL): one start time is enough
        if phase == "start":
            self._started = self._clock()
        else:
            self._children[info["generation"]].observe(self._clock() - self._started)


def tune() -> PauseWatch:
    """Collect, freeze what start-up left, set GC_THRESHOLDS and watch the pauses."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    watch = PauseWatch()
    gc.callbacks.append(watch)
    return watch
