"""The generator's reference data: countries, currencies, time zones and MCC spend profiles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from app.transactions.contract import Channel

#: Channel codes as stored in the generator's columns; index = code.
CHANNEL_NAMES: Final[tuple[Channel, ...]] = ("pos", "ecom", "atm")
POS, ECOM, ATM = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Country:
    """A country cards live in and merchants trade in."""

    code: str
    currency: str
    utc_offset_h: int
    weight: float
    #: Minor units of this currency per US cent (JPY has no minor unit: 1 cent ≈ 1.5 yen).
    minor_per_usd_cent: float


COUNTRIES: Final[tuple[Country, ...]] = (
    Country("US", "USD", -5, 0.30, 1.0),
    Country("GB", "GBP", 0, 0.10, 0.79),
    Country("DE", "EUR", 1, 0.10, 0.92),
    Country("FR", "EUR", 1, 0.08, 0.92),
    Country("ES", "EUR", 1, 0.06, 0.92),
    Country("IT", "EUR", 1, 0.06, 0.92),
    Country("NL", "EUR", 1, 0.04, 0.92),
    Country("IE", "EUR", 0, 0.02, 0.92),
    Country("CA", "CAD", -5, 0.07, 1.36),
    Country("AU", "AUD", 10, 0.05, 1.5),
    Country("JP", "JPY", 9, 0.05, 1.5),
    Country("CH", "CHF", 1, 0.03, 0.9),
    Country("SG", "SGD", 8, 0.02, 1.35),
    Country("NZ", "NZD", 12, 0.01, 1.6),
)
#: Countries whose online merchants sell across borders (cross-border e-commerce).
ECOM_HUBS: Final[tuple[str, ...]] = ("US", "GB", "IE", "NL")


@dataclass(frozen=True, slots=True)
class MccProfile:
    """How people spend at one merchant category: share, amount distribution, channel mix."""

    mcc: int
    name: str
    #: Share of legitimate transactions in this category.
    weight: float
    #: Median amount in US cents (log-normal) and its log-space spread.
    median_usd_cents: float
    sigma: float
    #: Probability of each channel, in CHANNEL_NAMES order.
    channel_mix: tuple[float, float, float]


MCCS: Final[tuple[MccProfile, ...]] = (
    MccProfile(5411, "grocery", 0.20, 3_500, 0.7, (0.95, 0.05, 0.0)),
    MccProfile(5812, "restaurants", 0.13, 2_500, 0.6, (0.90, 0.10, 0.0)),
    MccProfile(5814, "fast_food", 0.10, 1_100, 0.5, (0.85, 0.15, 0.0)),
    MccProfile(5541, "fuel", 0.07, 4_500, 0.4, (1.0, 0.0, 0.0)),
    MccProfile(4111, "transit", 0.06, 350, 0.5, (0.70, 0.30, 0.0)),
    MccProfile(5999, "misc_retail", 0.07, 3_000, 0.9, (0.60, 0.40, 0.0)),
    MccProfile(5651, "clothing", 0.05, 6_000, 0.7, (0.65, 0.35, 0.0)),
    MccProfile(5732, "electronics", 0.025, 25_000, 0.9, (0.50, 0.50, 0.0)),
    MccProfile(4511, "airlines", 0.01, 45_000, 0.6, (0.10, 0.90, 0.0)),
    MccProfile(7011, "hotels", 0.012, 30_000, 0.6, (0.40, 0.60, 0.0)),
    MccProfile(5912, "pharmacy", 0.05, 2_000, 0.7, (0.90, 0.10, 0.0)),
    MccProfile(5815, "digital_goods", 0.06, 1_200, 0.8, (0.0, 1.0, 0.0)),
    MccProfile(6011, "atm", 0.05, 10_000, 0.0, (0.0, 0.0, 1.0)),
    MccProfile(4121, "rideshare", 0.05, 1_800, 0.5, (0.30, 0.70, 0.0)),
    MccProfile(5311, "department_store", 0.04, 7_000, 0.8, (0.70, 0.30, 0.0)),
    MccProfile(5944, "jewelry", 0.003, 40_000, 0.8, (0.80, 0.20, 0.0)),
)

#: ATM withdrawals are round amounts (US cents), drawn with these probabilities.
ATM_AMOUNTS_USD_CENTS: Final = np.array([2_000, 4_000, 5_000, 6_000, 8_000, 10_000, 20_000, 30_000])
ATM_AMOUNT_P: Final = np.array([0.18, 0.16, 0.14, 0.12, 0.10, 0.16, 0.10, 0.04])
#: ATM amounts are rounded to this many minor units of the local currency.
ATM_ROUNDING_MINOR: Final = 1_000

#: Relative activity per local hour of day (0..23): quiet at night, peaks at lunch and evening.
DIURNAL: Final = np.array([
    0.30, 0.20, 0.12, 0.10, 0.10, 0.20, 0.50, 1.00, 1.40, 1.50, 1.60, 1.80,
    2.20, 2.00, 1.70, 1.60, 1.70, 1.90, 2.20, 2.10, 1.70, 1.30, 0.90, 0.60,
])

#: Categories a card-testing script or a compromised online shop plausibly sits in.
TESTING_MCCS: Final[tuple[int, ...]] = (5815, 5999)
HIGH_VALUE_MCCS: Final[tuple[int, ...]] = (5732, 5944, 5311, 4511)
COMPROMISED_MCCS: Final[tuple[int, ...]] = (5732, 5999, 5651, 5815)


def country_index(code: str) -> int:
    """Position of a country code in COUNTRIES."""
    return next(i for i, c in enumerate(COUNTRIES) if c.code == code)


def mcc_index(mcc: int) -> int:
    """Position of an MCC in MCCS."""
    return next(i for i, p in enumerate(MCCS) if p.mcc == mcc)


def country_weights() -> np.ndarray:
    """COUNTRIES' weights as probabilities."""
    w = np.array([c.weight for c in COUNTRIES])
    return w / w.sum()


def mcc_weights() -> np.ndarray:
    """MCCS' weights as probabilities."""
    w = np.array([p.weight for p in MCCS])
    return w / w.sum()
