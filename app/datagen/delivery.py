"""The order a log is delivered in: displaced events, upstream redeliveries and bad messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

LineKind = Literal["valid", "redelivery", "malformed"]
#: Line kind codes as stored in Delivery.kind; index = code.
LINE_KINDS: Final[tuple[LineKind, ...]] = ("valid", "redelivery", "malformed")
VALID, REDELIVERY, MALFORMED = range(3)

#: Share of displaced events moved by more than the allowed lateness.
BEYOND_LATENESS_SHARE: Final = 0.10
#: A displaced event is late by at most this much beyond the allowed lateness.
MAX_EXTRA_DISPLACEMENT_MS: Final = 2 * 3_600_000
#: A redelivered copy follows its original by this many lines (inclusive range).
REDELIVERY_GAP_LINES: Final = (1, 1000)
#: Card numbers are packed above this bit to find late events in one vectorised pass.
_CARD_SHIFT: Final = 40


@dataclass(frozen=True, slots=True)
class Delivery:
    """Each line of the file in order: the kind of line and what it carries."""

    #: Transaction row for valid and redelivery lines, bad-message index for malformed lines.
    row: np.ndarray
    kind: np.ndarray
    #: Per transaction row: moved away from its event-time position.
    displaced: np.ndarray
    #: Per transaction row: older than its card's max ts minus the allowed lateness on arrival.
    late: np.ndarray


def arrange(
    rng: np.random.Generator, card: np.ndarray, ts: np.ndarray, *, out_of_order: float,
    redelivery: float, bad_messages: int, allowed_lateness_ms: int,
) -> Delivery:
    """Order transactions (sorted by ts) into lines: displace some, repeat some, add bad ones."""
    n = len(ts)
    arrival, displaced = _displace(rng, card, ts, round(out_of_order * n), allowed_lateness_ms)
    order = np.argsort(arrival, kind="stable")
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)

    repeated = rng.choice(n, size=min(round(redelivery * n), n), replace=False)
    gap = rng.integers(REDELIVERY_GAP_LINES[0], REDELIVERY_GAP_LINES[1] + 1, len(repeated))
    # Bad message j goes after line after[j]; sorted, so they appear in index order.
    after = np.sort(rng.integers(-1, n, bad_messages))

    # Sort keys: 4 * line position, +1 for a copy, +2 for a bad message placed after the line.
    key = np.concatenate((position * 4, (position[repeated] + gap) * 4 + 1, after * 4 + 2))
    row = np.concatenate((np.arange(n), repeated, np.arange(bad_messages)))
    kind = np.concatenate((
        np.full(n, VALID), np.full(len(repeated), REDELIVERY), np.full(bad_messages, MALFORMED)
    )).astype(np.int8)
    lines = np.argsort(key, kind="stable")
    return Delivery(
        row=row[lines], kind=kind[lines], displaced=displaced,
        late=late_events(card, ts, order, allowed_lateness_ms),
    )


def _displace(
    rng: np.random.Generator, card: np.ndarray, ts: np.ndarray, count: int, lateness_ms: int
) -> tuple[np.ndarray, np.ndarray]:
    """Arrival keys: ts, except for `count` events moved earlier or later in the file.

    About BEYOND_LATENESS_SHARE of them arrive just after their card's first event more than
    the allowed lateness younger, so they are late by the per-card rule, not merely moved (only
    events with such a successor within the extra bound qualify). The others move earlier or
    later by at most the allowed lateness.
    """
    n = len(ts)
    count = min(count, n)
    rows = np.arange(n)
    successor, found = _first_younger(card, ts, lateness_ms)
    found &= ts[successor] - ts <= lateness_ms + MAX_EXTRA_DISPLACEMENT_MS
    eligible = np.flatnonzero(found)
    beyond = rng.choice(eligible, size=min(round(count * BEYOND_LATENESS_SHARE), len(eligible)),
                        replace=False)
    displaced = np.zeros(n, dtype=bool)
    displaced[beyond] = True
    within = rng.choice(rows[~displaced], size=count - len(beyond), replace=False)
    displaced[within] = True

    arrival = ts.copy()
    delay = rng.integers(1, max(lateness_ms, 1) + 1, len(within))
    arrival[within] += np.where(rng.random(len(within)) < 0.5, -delay, delay)
    arrival[beyond] = ts[successor[beyond]] + rng.integers(1, 60_001, len(beyond))
    return arrival, displaced


def _first_younger(
    card: np.ndarray, ts: np.ndarray, lateness_ms: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: its card's first row with ts > its ts + lateness, and whether there is one."""
    by_card = np.argsort(card, kind="stable")  # rows are in ts order, so ts order within a card
    packed = _pack(card[by_card], ts[by_card] - ts.min())
    # The queries are sorted too, which keeps this search cache-friendly.
    at = np.searchsorted(packed, packed + lateness_ms + 1)
    found_sorted = at < len(packed)
    successor_sorted = by_card[np.minimum(at, len(packed) - 1)]
    found_sorted &= card[successor_sorted] == card[by_card]
    successor = np.empty_like(successor_sorted)
    found = np.empty_like(found_sorted)
    successor[by_card] = successor_sorted
    found[by_card] = found_sorted
    return successor, found


def _pack(card: np.ndarray, rel_ts: np.ndarray) -> np.ndarray:
    """Card number above the relative time: sorting by this sorts by card, then time."""
    if len(rel_ts) and rel_ts.max() >= 1 << _CARD_SHIFT:
        raise ValueError("event times span too long to pack with card numbers")
    return rel_ts + (card << _CARD_SHIFT)


def late_events(
    card: np.ndarray, ts: np.ndarray, order: np.ndarray, lateness_ms: int
) -> np.ndarray:
    """Rows that arrive (in `order`) older than their card's max ts so far minus the lateness."""
    n = len(ts)
    late = np.zeros(n, dtype=bool)
    if n < 2:
        return late
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    by_card = np.lexsort((position, card))
    # Packing the card above the time makes one running max restart at each card.
    packed = _pack(card[by_card], ts[by_card] - ts.min())
    running = np.maximum.accumulate(packed)
    late[by_card[1:]] = packed[1:] < running[:-1] - lateness_ms
    return late
