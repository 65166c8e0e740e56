"""The cards and merchants a log is drawn from: activity, home countries, trips, merchant groups."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.datagen.catalog import COUNTRIES, MCCS, country_weights, mcc_weights
from app.datagen.config import DAY_MS

N_COUNTRIES = len(COUNTRIES)
N_MCCS = len(MCCS)
#: Every (country, MCC) pair is a merchant group; each holds at least one merchant.
N_GROUPS = N_COUNTRIES * N_MCCS
#: Share of cards whose holder travels abroad once during the log.
TRAVELLER_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Cards:
    """Per-card attributes, indexed by card number."""

    #: Relative transaction rate (log-normal: a few cards are far busier than most).
    activity: np.ndarray
    home: np.ndarray
    #: Multiplier on the card holder's typical amounts.
    spend_scale: np.ndarray
    #: A trip abroad as [trip_start, trip_end) in ms; trip_end == trip_start when none.
    trip_start: np.ndarray
    trip_end: np.ndarray
    trip_country: np.ndarray

    @property
    def count(self) -> int:
        """Number of cards."""
        return len(self.activity)

    def location(self, card: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The country each card is in at each time: its trip country during a trip, else home."""
        away = (ts >= self.trip_start[card]) & (ts < self.trip_end[card])
        return np.where(away, self.trip_country[card], self.home[card])


@dataclass(frozen=True, slots=True)
class Merchants:
    """The merchant population, numbered so that each (country, MCC) group is contiguous."""

    country: np.ndarray
    mcc_index: np.ndarray
    group_offset: np.ndarray
    group_size: np.ndarray

    @property
    def count(self) -> int:
        """Number of merchants."""
        return len(self.country)

    def popular(self, country: np.ndarray, mcc_index: np.ndarray, u: np.ndarray) -> np.ndarray:
        """A merchant per row from its group, skewed towards the group's first (popular) ones."""
        group = country * N_MCCS + mcc_index
        size = self.group_size[group]
        return self.group_offset[group] + np.minimum((size * u * u).astype(np.int64), size - 1)

    def uniform(self, country: np.ndarray, mcc_index: np.ndarray, u: np.ndarray) -> np.ndarray:
        """A merchant per row drawn uniformly from its group: someone the card has not visited."""
        group = country * N_MCCS + mcc_index
        size = self.group_size[group]
        return self.group_offset[group] + np.minimum((size * u).astype(np.int64), size - 1)

    def favourite(
        self, card: np.ndarray, country: np.ndarray, mcc_index: np.ndarray, k: np.ndarray
    ) -> np.ndarray:
        """The card's k-th regular merchant in a group: a fixed arithmetic hash, no hash()."""
        group = country * N_MCCS + mcc_index
        mixed = card * 2_654_435_761 + group * 40_503 + k * 97_531
        return self.group_offset[group] + mixed % self.group_size[group]


def draw_cards(
    rng: np.random.Generator, count: int, *, start_ms: int, days: int
) -> Cards:
    """Draw `count` cards: heavy-tailed activity, home country, spend scale and maybe one trip."""
    activity = rng.lognormal(0.0, 1.1, count)
    home = rng.choice(N_COUNTRIES, size=count, p=country_weights())
    spend_scale = rng.lognormal(0.0, 0.35, count)
    travels = rng.random(count) < TRAVELLER_SHARE
    length = rng.integers(2 * DAY_MS, 7 * DAY_MS, count)
    span = days * DAY_MS
    trip_start = start_ms + (rng.random(count) * max(span - 2 * DAY_MS, DAY_MS)).astype(np.int64)
    trip_end = np.where(travels, trip_start + length, trip_start)
    # A different country than home: shift by 1..N-1 places.
    trip_country = (home + rng.integers(1, N_COUNTRIES, count)) % N_COUNTRIES
    return Cards(activity, home, spend_scale, trip_start, trip_end, trip_country)


def draw_merchants(rng: np.random.Generator, count: int) -> Merchants:
    """Draw `count` (>= N_GROUPS) merchants: one per group, the rest by country and MCC weight."""
    if count < N_GROUPS:
        raise ValueError(f"merchants must be at least {N_GROUPS} (one per country and MCC)")
    share = np.outer(country_weights(), mcc_weights()).ravel()
    size = 1 + rng.multinomial(count - N_GROUPS, share / share.sum())
    offset = np.concatenate(([0], np.cumsum(size)[:-1]))
    group = np.repeat(np.arange(N_GROUPS), size)
    return Merchants(
        country=group // N_MCCS,
        mcc_index=group % N_MCCS,
        group_offset=offset.astype(np.int64),
        group_size=size.astype(np.int64),
    )


def default_merchant_count(cards: int) -> int:
    """A merchant population sized to the card count (at least 3 per group)."""
    return max(3 * N_GROUPS, cards // 5)
