"""The labelled fraud patterns have the structure they are named for."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from app.datagen.catalog import ECOM
from app.datagen.columns import (
    ACCOUNT_TAKEOVER,
    CARD_TESTING,
    COMPROMISED_MERCHANT,
    LEGIT,
    TxnColumns,
)
from app.datagen.config import GeneratorConfig
from app.datagen.fraud import (
    COMPROMISED_DAILY_VICTIMS,
    COMPROMISED_DAYS,
    TAKEOVER_SPAN_MS,
    TESTING_SPAN_MS,
    incident_sizes,
)
from app.datagen.generator import generate_log

MINUTE = 60_000


@pytest.fixture(scope="module")
def txns() -> TxnColumns:
    return generate_log(GeneratorConfig(cards=500, txns=20_000, seed=8, fraud_rate=0.03)).txns


def _episodes(t: TxnColumns, pattern: int, key: np.ndarray, gap_ms: int) -> list[np.ndarray]:
    """Rows of `pattern` grouped by `key`, split where consecutive events are > gap_ms apart."""
    rows = np.flatnonzero(t.pattern == pattern)
    out = []
    for k in np.unique(key[rows]):
        mine = rows[key[rows] == k]
        mine = mine[np.argsort(t.ts[mine], kind="stable")]
        cuts = np.flatnonzero(np.diff(t.ts[mine]) > gap_ms) + 1
        out.extend(np.split(mine, cuts))
    return out


def test_card_testing_is_bursts_of_small_amounts_on_one_card(txns: TxnColumns) -> None:
    bursts = _episodes(txns, CARD_TESTING, txns.card, gap_ms=10 * MINUTE)
    assert len(bursts) >= 5
    for b in bursts:
        assert len(b) >= 5
        assert txns.ts[b].max() - txns.ts[b].min() <= TESTING_SPAN_MS[1]
        assert np.all((txns.amount[b] >= 100) & (txns.amount[b] <= 500))
        assert len(set(txns.merchant[b].tolist())) >= 3
    rows = np.flatnonzero(txns.pattern == CARD_TESTING)
    assert (txns.channel[rows] == ECOM).mean() > 0.6  # often online


def test_account_takeover_is_high_value_in_a_new_country_at_new_merchants(
    txns: TxnColumns,
) -> None:
    runs = _episodes(txns, ACCOUNT_TAKEOVER, txns.card, gap_ms=TAKEOVER_SPAN_MS[1])
    assert len(runs) >= 5
    legit = txns.pattern == LEGIT
    legit_amounts = txns.amount[legit]
    for run in runs:
        card = txns.card[run[0]]
        own = legit & (txns.card == card)
        assert len(run) >= 3
        assert txns.ts[run].max() - txns.ts[run].min() <= TAKEOVER_SPAN_MS[1]
        assert np.median(txns.amount[run]) > 5 * np.median(legit_amounts)
        if own.any():
            home = Counter(txns.country[own].tolist()).most_common(1)[0][0]
            assert np.all(txns.country[run] != home)
            assert not set(txns.merchant[run].tolist()) & set(txns.merchant[own].tolist())


def test_compromised_merchant_charges_new_cards_every_day_for_weeks() -> None:
    config = GeneratorConfig(cards=2_000, txns=60_000, seed=8, fraud_rate=0.03, days=28)
    txns = generate_log(config).txns
    rows = np.flatnonzero(txns.pattern == COMPROMISED_MERCHANT)
    incidents = [rows[txns.merchant[rows] == m] for m in np.unique(txns.merchant[rows])]
    assert len(incidents) >= 2
    day = 86_400_000
    for inc in incidents:
        inc = inc[np.argsort(txns.ts[inc], kind="stable")]
        lasted = int(txns.ts[inc].max() - txns.ts[inc].min())
        assert lasted <= COMPROMISED_DAYS[1] * day + 30 * MINUTE
        assert np.all(txns.channel[inc] == ECOM)
        assert np.all(txns.amount[inc] >= 3_900)  # 50.00 USD in the cheapest currency
        assert len(set(txns.country[inc].tolist())) == 1
        victims = len(set(txns.card[inc].tolist()))
        assert victims <= COMPROMISED_DAILY_VICTIMS[1] * (lasted // day + 1)
        # one victim's charges are minutes apart; the merchant keeps charging for days
        per_card = Counter(txns.card[inc].tolist())
        assert max(per_card.values()) <= 3
    # all but the incident cut to meet the fraud budget outlast the 7-day label delay
    long = [i for i in incidents if txns.ts[i].max() - txns.ts[i].min() > 7 * day]
    assert len(long) >= len(incidents) - 1


def test_incident_sizes_meet_the_target_in_whole_incidents() -> None:
    rng = np.random.default_rng(0)
    for target in (0, 1, 4, 5, 6, 29, 30, 31, 1_000):
        sizes = incident_sizes(rng, target, 5, 30)
        assert np.all((sizes >= 5) & (sizes <= 30))
        if target == 0:
            assert len(sizes) == 0
        else:  # only the last incident is cut, and never below the minimum of 5
            assert target <= sizes.sum() <= target + 4
