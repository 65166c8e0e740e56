"""Legitimate card spending: when, where, at which merchant, through which channel, how much."""

from __future__ import annotations

from typing import Final

import numpy as np

from app.datagen.catalog import (
    ATM,
    ATM_AMOUNT_P,
    ATM_AMOUNTS_USD_CENTS,
    ATM_ROUNDING_MINOR,
    COUNTRIES,
    DIURNAL,
    ECOM,
    ECOM_HUBS,
    MCCS,
    POS,
    country_index,
    mcc_weights,
)
from app.datagen.columns import LEGIT, TxnColumns
from app.datagen.config import DAY_MS
from app.datagen.population import Cards, Merchants
from app.transactions.contract import MAX_AMOUNT_MINOR

HOUR_MS: Final = 3_600_000
#: Share of online purchases made at a foreign e-commerce hub.
CROSS_BORDER_ECOM: Final = 0.15
#: Share of in-person purchases at home made at one of the card's regular merchants.
REGULAR_MERCHANT: Final = 0.45
REGULARS_PER_GROUP: Final = 3

_MINOR_PER_CENT: Final = np.array([c.minor_per_usd_cent for c in COUNTRIES])
_UTC_OFFSET_MS: Final = np.array([c.utc_offset_h * HOUR_MS for c in COUNTRIES], dtype=np.int64)
_MCC_CODES: Final = np.array([p.mcc for p in MCCS], dtype=np.int64)
_LOG_MEDIAN: Final = np.log([p.median_usd_cents for p in MCCS])
_SIGMA: Final = np.array([p.sigma for p in MCCS])
_MIX: Final = np.array([p.channel_mix for p in MCCS])
_ATM_MCC: Final = next(i for i, p in enumerate(MCCS) if p.mcc == 6011)
_HUBS: Final = np.array([country_index(c) for c in ECOM_HUBS], dtype=np.int64)


def mcc_codes(mcc_index: np.ndarray) -> np.ndarray:
    """The MCC values of MCCS positions."""
    return _MCC_CODES[mcc_index]


def local_amounts(usd_cents: np.ndarray, country: np.ndarray) -> np.ndarray:
    """Amounts in US cents as integer minor units of each country's currency (at least 1)."""
    minor = np.rint(usd_cents * _MINOR_PER_CENT[country]).astype(np.int64)
    return np.clip(minor, 1, MAX_AMOUNT_MINOR)


def lognormal_amounts(
    rng: np.random.Generator, median_usd_cents: float, sigma: float, country: np.ndarray,
    *, low_usd_cents: float, high_usd_cents: float,
) -> np.ndarray:
    """Log-normal amounts around a median, clipped to [low, high], in local minor units."""
    usd = np.exp(np.log(median_usd_cents) + sigma * rng.standard_normal(len(country)))
    return local_amounts(np.clip(usd, low_usd_cents, high_usd_cents), country)


def draw_times(
    rng: np.random.Generator, utc_offset_ms: np.ndarray, *, start_ms: int, days: int
) -> np.ndarray:
    """Event times in [start, start + days) following the diurnal cycle in each local time."""
    n = len(utc_offset_ms)
    day = rng.integers(0, days + 1, n)
    local = rng.choice(24, size=n, p=DIURNAL / DIURNAL.sum()) * HOUR_MS + rng.integers(
        0, HOUR_MS, n
    )
    midnight = start_ms - start_ms % DAY_MS
    ts = midnight + day * DAY_MS + (local - utc_offset_ms) % DAY_MS
    # Wrapping by whole days keeps each event's time of day.
    span = days * DAY_MS
    return start_ms + (ts - start_ms) % span


def draw_channels(rng: np.random.Generator, mcc_index: np.ndarray) -> np.ndarray:
    """A channel per row from its MCC's channel mix."""
    mix = _MIX[mcc_index]
    u = rng.random(len(mcc_index))
    ecom_or_atm = np.where((mix[:, 2] == 0) | (u < mix[:, 0] + mix[:, 1]), ECOM, ATM)
    return np.where(u < mix[:, 0], POS, ecom_or_atm)


def legit_spending(
    rng: np.random.Generator, cards: Cards, merchants: Merchants, count: int,
    *, start_ms: int, days: int,
) -> TxnColumns:
    """`count` legitimate transactions spread over the cards by their activity."""
    card = rng.choice(cards.count, size=count, p=cards.activity / cards.activity.sum())
    ts = draw_times(rng, _UTC_OFFSET_MS[cards.home[card]], start_ms=start_ms, days=days)
    where = cards.location(card, ts)
    mcc_index = rng.choice(len(MCCS), size=count, p=mcc_weights())
    channel = draw_channels(rng, mcc_index)

    cross_border = (channel == ECOM) & (rng.random(count) < CROSS_BORDER_ECOM)
    country = np.where(cross_border, _HUBS[rng.integers(0, len(_HUBS), count)], where)
    regular = (
        (channel != ECOM) & (where == cards.home[card]) & (rng.random(count) < REGULAR_MERCHANT)
    )
    u = rng.random(count)
    k = rng.integers(0, REGULARS_PER_GROUP, count)
    merchant = np.where(
        regular,
        merchants.favourite(card, country, mcc_index, k),
        merchants.popular(country, mcc_index, u),
    )

    usd = np.exp(_LOG_MEDIAN[mcc_index] + _SIGMA[mcc_index] * rng.standard_normal(count))
    usd *= cards.spend_scale[card]
    atm_usd = rng.choice(ATM_AMOUNTS_USD_CENTS, size=count, p=ATM_AMOUNT_P)
    atm_minor = atm_usd * _MINOR_PER_CENT[country] / ATM_ROUNDING_MINOR
    atm = np.maximum(np.rint(atm_minor).astype(np.int64), 1) * ATM_ROUNDING_MINOR
    amount = np.where(mcc_index == _ATM_MCC, atm, local_amounts(usd, country))

    return TxnColumns.build(
        card=card, ts=ts, amount=amount, merchant=merchant, mcc=_MCC_CODES[mcc_index],
        country=country, channel=channel, pattern=LEGIT,
    )
