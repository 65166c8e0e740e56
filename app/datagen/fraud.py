"""The labelled fraud patterns: card testing, account takeover and a compromised merchant."""

from __future__ import annotations

from typing import Final

import numpy as np

from app.datagen.catalog import (
    COMPROMISED_MCCS,
    ECOM,
    HIGH_VALUE_MCCS,
    POS,
    TESTING_MCCS,
    country_weights,
    mcc_index,
)
from app.datagen.columns import (
    ACCOUNT_TAKEOVER,
    CARD_TESTING,
    COMPROMISED_MERCHANT,
    TxnColumns,
)
from app.datagen.config import DAY_MS
from app.datagen.population import N_COUNTRIES, Cards, Merchants
from app.datagen.spending import lognormal_amounts, mcc_codes

MINUTE_MS: Final = 60_000
HOUR_MS: Final = 3_600_000
#: How the fraud budget splits over card testing, account takeover and compromised merchant.
PATTERN_SHARES: Final = (0.40, 0.35, 0.25)

#: Card testing: a burst of 5..30 tiny amounts within 30 s..5 min, mostly online.
TESTING_BURST: Final = (5, 30)
TESTING_SPAN_MS: Final = (30_000, 5 * MINUTE_MS)
TESTING_AMOUNT_MINOR: Final = (100, 500)
TESTING_ONLINE_SHARE: Final = 0.85
#: Account takeover: a run of 3..12 high-value purchases in a new country within 10 min..3 h.
TAKEOVER_RUN: Final = (3, 12)
TAKEOVER_SPAN_MS: Final = (10 * MINUTE_MS, 3 * HOUR_MS)
TAKEOVER_ONLINE_SHARE: Final = 0.6
#: Compromised merchant: for 10..24 days (cut to the log), 1..3 new victims a day, each charged
#: 1..3 times within minutes. It outlasts the 7-day label delay, so the label-fed merchant
#: features see its first week's frauds during the weeks after (docs/features.md).
COMPROMISED_DAYS: Final = (10, 24)
COMPROMISED_DAILY_VICTIMS: Final = (1, 3)
COMPROMISED_CHARGES_P: Final = np.array([0.3, 0.4, 0.3])
COMPROMISED_GAP_MS: Final = (MINUTE_MS, 10 * MINUTE_MS)
_TAIL_MS: Final = 30 * MINUTE_MS  # room for a victim's later charges before the log ends

_TESTING_ONLINE_MCCS: Final = np.array([mcc_index(m) for m in TESTING_MCCS])
_TESTING_POS_MCC: Final = mcc_index(5999)
_HIGH_VALUE_MCCS: Final = np.array([mcc_index(m) for m in HIGH_VALUE_MCCS])
_COMPROMISED_MCCS: Final = np.array([mcc_index(m) for m in COMPROMISED_MCCS])


def fraud_incidents(
    rng: np.random.Generator, cards: Cards, merchants: Merchants, total: int,
    *, start_ms: int, days: int,
) -> TxnColumns:
    """About `total` fraudulent transactions, split over the three patterns in whole incidents."""
    testing = round(total * PATTERN_SHARES[0])
    takeover = round(total * PATTERN_SHARES[1])
    compromised = total - testing - takeover
    span = days * DAY_MS
    return TxnColumns.concat([
        card_testing(rng, cards, merchants, testing, start_ms=start_ms, span_ms=span),
        account_takeover(rng, cards, merchants, takeover, start_ms=start_ms, span_ms=span),
        compromised_merchant(rng, cards, merchants, compromised, start_ms=start_ms, span_ms=span),
    ])


def incident_sizes(rng: np.random.Generator, target: int, low: int, high: int) -> np.ndarray:
    """Sizes in [low, high] adding up to `target` (the last one cut, but never below `low`)."""
    if target <= 0:
        return np.zeros(0, dtype=np.int64)
    sizes = rng.integers(low, high + 1, target // low + 1)
    cumulative = np.cumsum(sizes)
    last = int(np.searchsorted(cumulative, target))
    sizes = sizes[: last + 1].copy()
    before = int(cumulative[last - 1]) if last else 0
    sizes[last] = max(low, target - before)
    return sizes


def _starts(rng: np.random.Generator, n: int, span: np.ndarray, *, start_ms: int,
            span_ms: int) -> np.ndarray:
    return start_ms + (rng.random(n) * (span_ms - span - _TAIL_MS)).astype(np.int64)


def _incidents(
    rng: np.random.Generator, cards: Cards, target: int, size: tuple[int, int],
    span_range: tuple[int, int], *, start_ms: int, span_ms: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Incidents of `size` transactions adding up to `target`, each on one card within a span
    drawn from `span_range`: their sizes, victims, spans and start times."""
    sizes = incident_sizes(rng, target, *size)
    count = len(sizes)
    victim = rng.integers(0, cards.count, count)
    span = rng.integers(span_range[0], span_range[1] + 1, count)
    return sizes, victim, span, _starts(rng, count, span, start_ms=start_ms, span_ms=span_ms)


def card_testing(
    rng: np.random.Generator, cards: Cards, merchants: Merchants, target: int,
    *, start_ms: int, span_ms: int,
) -> TxnColumns:
    """Bursts of tiny amounts on one card at many distinct merchants within a few minutes."""
    sizes, victim, span, t0 = _incidents(rng, cards, target, TESTING_BURST, TESTING_SPAN_MS,
                                         start_ms=start_ms, span_ms=span_ms)
    bursts = len(sizes)
    online = rng.random(bursts) < TESTING_ONLINE_SHARE

    burst = np.repeat(np.arange(bursts), sizes)
    n = len(burst)
    on = online[burst]
    ts = t0[burst] + (rng.random(n) * span[burst]).astype(np.int64)
    # Online: shops anywhere; in person: a cloned card tried around the holder's home.
    country = np.where(on, rng.choice(N_COUNTRIES, size=n, p=country_weights()),
                       cards.home[victim[burst]])
    mcc = np.where(on, _TESTING_ONLINE_MCCS[rng.integers(0, len(_TESTING_ONLINE_MCCS), n)],
                   _TESTING_POS_MCC)
    return TxnColumns.build(
        card=victim[burst], ts=ts,
        amount=rng.integers(TESTING_AMOUNT_MINOR[0], TESTING_AMOUNT_MINOR[1] + 1, n),
        merchant=merchants.uniform(country, mcc, rng.random(n)), mcc=mcc_codes(mcc),
        country=country, channel=np.where(on, ECOM, POS), pattern=CARD_TESTING,
    )


def account_takeover(
    rng: np.random.Generator, cards: Cards, merchants: Merchants, target: int,
    *, start_ms: int, span_ms: int,
) -> TxnColumns:
    """Runs of high-value purchases on one card in a country it has never been to."""
    sizes, victim, span, t0 = _incidents(rng, cards, target, TAKEOVER_RUN, TAKEOVER_SPAN_MS,
                                         start_ms=start_ms, span_ms=span_ms)
    runs = len(sizes)
    home = cards.home[victim]
    travelled = cards.trip_end[victim] > cards.trip_start[victim]
    new = (home + rng.integers(1, N_COUNTRIES, runs)) % N_COUNTRIES
    new = np.where(travelled & (new == cards.trip_country[victim]), (new + 1) % N_COUNTRIES, new)
    new = np.where(new == home, (new + 1) % N_COUNTRIES, new)

    run = np.repeat(np.arange(runs), sizes)
    n = len(run)
    country = new[run]
    mcc = _HIGH_VALUE_MCCS[rng.integers(0, len(_HIGH_VALUE_MCCS), n)]
    amount = lognormal_amounts(rng, 60_000, 0.6, country,
                               low_usd_cents=10_000, high_usd_cents=2_000_000)
    return TxnColumns.build(
        card=victim[run], ts=t0[run] + (rng.random(n) * span[run]).astype(np.int64),
        amount=amount, merchant=merchants.uniform(country, mcc, rng.random(n)),
        mcc=mcc_codes(mcc), country=country,
        channel=np.where(rng.random(n) < TAKEOVER_ONLINE_SHARE, ECOM, POS),
        pattern=ACCOUNT_TAKEOVER,
    )


def compromised_merchant(
    rng: np.random.Generator, cards: Cards, merchants: Merchants, target: int,
    *, start_ms: int, span_ms: int,
) -> TxnColumns:
    """One online merchant charging new cards every day for weeks, each a few times in minutes.

    An incident cut to meet the fraud budget keeps its earliest charges: it ends early.
    """
    parts: list[TxnColumns] = []
    made = 0
    while made < target:  # each incident adds at least one transaction
        country = rng.choice(N_COUNTRIES, size=1, p=country_weights())
        mcc = _COMPROMISED_MCCS[rng.integers(0, len(_COMPROMISED_MCCS), 1)]
        merchant = int(merchants.uniform(country, mcc, rng.random(1))[0])
        days = int(rng.integers(COMPROMISED_DAYS[0], COMPROMISED_DAYS[1] + 1))
        span = max(1, min(days * DAY_MS, span_ms - 2 * _TAIL_MS))
        t0 = int(_starts(rng, 1, np.array([span]), start_ms=start_ms, span_ms=span_ms)[0])
        daily = int(rng.integers(COMPROMISED_DAILY_VICTIMS[0], COMPROMISED_DAILY_VICTIMS[1] + 1))
        k = min(max(1, daily * span // DAY_MS), cards.count)
        victims = rng.choice(cards.count, size=k, replace=False)
        charges = rng.choice(np.arange(1, 4), size=k, p=COMPROMISED_CHARGES_P)

        victim = np.repeat(np.arange(k), charges)
        first = t0 + (rng.random(k) * span).astype(np.int64)
        gaps = rng.integers(COMPROMISED_GAP_MS[0], COMPROMISED_GAP_MS[1] + 1, len(victim))
        # A victim's first charge is at `first`, later ones follow by gaps.
        starts = np.concatenate(([0], np.cumsum(charges)[:-1]))
        gaps[starts] = 0
        offset = np.cumsum(gaps) - np.repeat(np.cumsum(gaps)[starts], charges)
        ts = first[victim] + offset
        n = min(len(victim), target - made)
        rows = np.argsort(ts, kind="stable")[:n]
        at = np.full(n, country[0])
        parts.append(TxnColumns.build(
            card=victims[victim][rows], ts=ts[rows],
            amount=lognormal_amounts(rng, 30_000, 0.5, at,
                                     low_usd_cents=5_000, high_usd_cents=500_000),
            merchant=np.full(n, merchant), mcc=np.full(n, mcc_codes(mcc)[0]), country=at,
            channel=np.full(n, ECOM), pattern=COMPROMISED_MERCHANT,
        ))
        made += n
    return TxnColumns.concat(parts) if parts else TxnColumns.empty()
