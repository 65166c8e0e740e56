"""Merchant features: the rule by hand, and the online book equal to the offline table."""

from __future__ import annotations

import random
import struct

import numpy as np

from app.features.declaration import HOUR_MS, MERCHANT_FEATURE_NAMES
from app.features.merchant import (
    EMPTY,
    EXPLAIN_MS,
    NEVER,
    NO_CUT,
    MerchantBook,
    MerchantTable,
)
from app.transactions.labels import LabelRecord

DAY_MS = 24 * HOUR_MS
BASE = 17_800 * DAY_MS  # a day boundary (2018-09-25)


def lab(i: int, merchant: str | None, txn_day: float, reported_day: float, label: int,
        ts: bool = True, card: str | None = "c1") -> LabelRecord:
    txn_ts = BASE + int(txn_day * DAY_MS)
    return LabelRecord(f"l{i}", f"t{i}", card, label, BASE + int(reported_day * DAY_MS),
                       "test", merchant_id=merchant, txn_ts_ms=txn_ts if ts else None)


def named(values: tuple[int | float, ...]) -> dict[str, int | float]:
    return dict(zip(MERCHANT_FEATURE_NAMES, values, strict=True))


def test_the_rule_by_hand() -> None:
    labels = [
        lab(1, "m1", 0.5, 7.5, 1),    # txn hour 12, known from hour 181
        lab(2, "m1", 1.2, 8.2, 0),    # txn hour 28, known from hour 197
        lab(3, "m1", 1.9, 20.0, 1),   # txn hour 45, known only from hour 481
        lab(4, "m2", 1.0, 8.0, 1),    # another merchant
        lab(5, None, 1.0, 8.0, 1),    # no merchant: feeds nothing
        lab(6, "m1", 1.0, 8.0, 1, ts=False),  # no event time: feeds nothing
        lab(1, "m1", 0.5, 7.5, 1),    # the same label_id again: counted once
    ]
    book = MerchantBook()
    assert [book.add(x) for x in labels] == [True, True, True, True, False, False, False]
    table = MerchantTable.of(labels)
    # a transaction at hour 192 (day 8): the 1d window is txn hours [192 − 168 − 24, 192 − 168)
    at = BASE + 8 * DAY_MS + 5
    v = named(book.vector("m1", at))
    assert (v["merchant_labelled_1d"], v["merchant_fraud_share_1d"]) == (1, 1.0)
    assert (v["merchant_labelled_7d"], v["merchant_labelled_30d"]) == (1, 1)
    # hour 216: txn hours [24, 48) (1d) and [−120, 48) (7d); label 3 is not known yet
    v = named(book.vector("m1", BASE + 9 * DAY_MS))
    assert (v["merchant_labelled_1d"], v["merchant_fraud_share_1d"]) == (1, 0.0)
    assert (v["merchant_labelled_7d"], v["merchant_fraud_share_7d"]) == (2, 0.5)
    # hour 504: label 3 is known; the 1d window [312, 336) is empty, 7d [168, 336) too
    v = named(book.vector("m1", BASE + 21 * DAY_MS))
    assert v["merchant_labelled_7d"] == 0 and v["merchant_fraud_share_7d"] == 0.0
    assert (v["merchant_labelled_30d"], v["merchant_fraud_share_30d"]) == (3, 2 / 3)
    # a cut at hour 192 hides label 2 (known from 197) from an hour-216 transaction
    v = named(book.vector("m1", BASE + 9 * DAY_MS, cut_ms=BASE + 8 * DAY_MS + 1))
    assert (v["merchant_labelled_7d"], v["merchant_fraud_share_7d"]) == (1, 1.0)
    assert book.vector("nobody", at) == EMPTY
    cols = table.columns(["m1", "m1", "m2", "nobody"],
                         np.array([at, BASE + 21 * DAY_MS, BASE + 9 * DAY_MS, at]))
    rows = list(zip(*(c.tolist() for c in cols), strict=True))
    assert rows[0] == book.vector("m1", at)
    assert rows[1] == book.vector("m1", BASE + 21 * DAY_MS)
    assert rows[2] == book.vector("m2", BASE + 9 * DAY_MS) and rows[2][0] == 1
    assert rows[3] == EMPTY


def _bits(values: tuple[int | float, ...]) -> tuple[object, ...]:
    return tuple(struct.pack("<d", v) if type(v) is float else (type(v), v) for v in values)


def _random_labels(rng: random.Random, count: tuple[int, int], *, days: float,
                   merchants: int, delays: list[float], fraud: float,
                   resent: int) -> list[LabelRecord]:
    """`count` (an inclusive range) labels on merchants m0..m<merchants> within `days`, each
    reported one of `delays` (days) later and fraud with probability `fraud`; then up to
    `resent` of them sent again."""
    labels = []
    for i in range(rng.randint(*count)):
        txn_day = rng.uniform(0, days)
        labels.append(lab(i, f"m{rng.randint(0, merchants)}", txn_day,
                          txn_day + rng.choice(delays), int(rng.random() < fraud),
                          card=rng.choice(["c0", "c1", "c2", "c3", None])))
    labels += rng.sample(labels, min(resent, len(labels)))
    return labels


def test_online_book_equals_offline_table_on_random_logs() -> None:
    rng = random.Random(7)
    for _ in range(20):
        labels = _random_labels(rng, (0, 300), days=60, merchants=6,
                                delays=[0.0, 1.5, 7.0, 7.0, 9.3, 30.0], fraud=0.3, resent=10)
        table = MerchantTable.of(labels)
        queries = [(f"m{rng.randint(0, 7)}", BASE + rng.randint(0, 100 * DAY_MS))
                   for _ in range(200)]
        cols = table.columns([m for m, _ in queries], np.array([t for _, t in queries]))
        offline = list(zip(*(c.tolist() for c in cols), strict=True))
        book = MerchantBook()
        for x in labels:
            book.add(x)
        for (m, t), want in zip(queries, offline, strict=True):
            assert _bits(book.vector(m, t, NO_CUT)) == _bits(want), (m, t)
        # with a cut, the book equals a table built from the labels known by then
        cut = BASE + rng.randint(0, 100 * DAY_MS)
        known = [x for x in labels if x.reported_at_ms < cut // HOUR_MS * HOUR_MS]
        for m, t in queries:
            if t // HOUR_MS >= cut // HOUR_MS:
                want = MerchantTable.of(known).columns([m], np.array([t]))
                got = book.vector(m, t, cut)
                assert _bits(got) == _bits(tuple(c.tolist()[0] for c in want))


def test_online_book_lets_go_of_days_it_can_no_longer_need() -> None:
    book = MerchantBook(horizon_hours=40 * 24)
    assert book.add(lab(1, "m1", 0, 7, 1))
    book.vector("m1", BASE + 100 * DAY_MS)  # day 100: day 0 is out of reach
    assert book.vector("m1", BASE + 8 * DAY_MS) == EMPTY
    assert not book.add(lab(2, "m1", 1, 8, 1))  # too old to count for anything to come
    assert book.add(lab(3, "m1", 70, 77, 1))
    assert named(book.vector("m1", BASE + 78 * DAY_MS))["merchant_labelled_1d"] == 1


def test_labels_out_of_order_and_slow_ones_keep_the_book_exact() -> None:
    """Labels arriving in any order, some reported long after the delay, some with a cut."""
    rng = random.Random(11)
    labels = [lab(i, "m1", d, d + rng.choice([7.0, 7.0, 7.01, 9.5, 40.0]), i % 3 == 0)
              for i, d in enumerate(rng.uniform(0, 50) for _ in range(400))]
    book = MerchantBook()
    for x in rng.sample(labels, len(labels)):
        book.add(x)
    table = MerchantTable.of(labels)
    for t in range(0, 100 * DAY_MS, 7 * HOUR_MS + 13):
        want = tuple(c.tolist()[0] for c in table.columns(["m1"], np.array([BASE + t])))
        assert _bits(book.vector("m1", BASE + t)) == _bits(want), t


def brute_force(labels: list[LabelRecord], merchant: str, ts: int,
                cut: int = NO_CUT) -> tuple[int | float, ...]:
    """The module docstring's rule, literally: a pass over every label per window."""
    from app.features.declaration import MERCHANT_FEATURES

    hour, seen, mine = ts // HOUR_MS, set(), []
    for x in labels:
        if x.label_id not in seen and x.merchant_id is not None and x.txn_ts_ms is not None:
            seen.add(x.label_id)
            mine.append(x)
    eff = min(hour, cut // HOUR_MS)

    def explained(x: LabelRecord) -> int:
        return min((y.reported_at_ms // HOUR_MS + 1 for y in mine
                    if y.label == 1 and x.card_id is not None and y.card_id == x.card_id
                    and x.txn_ts_ms - EXPLAIN_MS <= y.txn_ts_ms < x.txn_ts_ms), default=NEVER)

    out: list[int | float] = []
    for f in MERCHANT_FEATURES:
        n, d = f.window.ms // HOUR_MS, f.delay.ms // HOUR_MS
        counted = sorted((x for x in mine if x.merchant_id == merchant
                          and hour - d - n <= x.txn_ts_ms // HOUR_MS < hour - d
                          and x.reported_at_ms // HOUR_MS + 1 <= eff),
                         key=lambda x: (x.txn_ts_ms, x.label_id))
        frauds = sum(x.label for x in counted)
        streak, since, age = 0, n + 1, 0
        for x in reversed(counted):
            if not x.label:
                since = hour - d - x.txn_ts_ms // HOUR_MS
                break
            streak += 1
            age = hour - d - x.txn_ts_ms // HOUR_MS
        unexplained = sum(1 for x in counted if x.label == 1 and explained(x) > eff)
        out.append({"labelled": len(counted), "frauds": frauds, "fraud_streak": streak,
                    "fraud_share": frauds / len(counted) if counted else 0.0,
                    "hours_since_genuine": since, "streak_age": age,
                    "unexplained": unexplained}[f.aggregate])
    return tuple(out)


def test_both_evaluators_equal_the_rule_applied_literally() -> None:
    rng = random.Random(5)
    for _ in range(12):
        labels = _random_labels(rng, (1, 120), days=45, merchants=3,
                                delays=[7.0, 7.0, 7.2, 8.5, 0.5, 20.0], fraud=0.5, resent=5)
        table = MerchantTable.of(labels)
        book = MerchantBook()
        for x in rng.sample(labels, len(labels)):  # the book in any arrival order
            book.add(x)
        queries = [(f"m{rng.randint(0, 4)}", BASE + rng.randint(0, 90 * DAY_MS))
                   for _ in range(60)]
        cols = table.columns([m for m, _ in queries], np.array([t for _, t in queries]))
        for (m, t), row in zip(queries, zip(*(c.tolist() for c in cols), strict=True),
                               strict=True):
            want = brute_force(labels, m, t)
            assert _bits(row) == _bits(want), (m, t, row, want)
            assert _bits(book.vector(m, t)) == _bits(want), (m, t)
            cut = t - rng.randint(0, 10 * DAY_MS)
            assert _bits(book.vector(m, t, cut)) == _bits(brute_force(labels, m, t, cut))


def test_a_compromised_merchant_shows_as_a_streak() -> None:
    # genuine until day 3, every transaction fraud from then on; labels 7 days after
    labels = [lab(i, "m1", i / 4, i / 4 + 7, int(i >= 12)) for i in range(40)]
    book = MerchantBook()
    for x in labels:
        book.add(x)
    v = named(book.vector("m1", BASE + 7 * DAY_MS + 6 * DAY_MS))  # sees txns before day 6
    assert v["merchant_fraud_streak_30d"] == 12 and v["merchant_frauds_30d"] == 12
    assert v["merchant_hours_since_genuine_30d"] == 6 * 24 - 66  # last genuine: hour 66
    assert v["merchant_streak_age_30d"] == 6 * 24 - 72  # first fraud of the run: hour 72
    assert named(EMPTY)["merchant_hours_since_genuine_30d"] == 30 * 24 + 1


def test_a_fraud_is_unexplained_until_its_card_explains_it() -> None:
    """The card's fraud of the 14 days before explains a merchant's fraud from the hour that
    fraud's label is known, in both evaluators, to the hour; the book's cache follows."""
    a = lab(1, "m1", 1.0, 8.0, 1, card="c9")     # known from hour 193
    b = lab(2, "m2", 3.0, 10.0, 1, card="c9")    # explained by a before it is known
    c = lab(3, "m3", 20.0, 27.0, 1, card="c8")   # known from hour 649
    d = lab(4, "m4", 19.0, 40.0, 1, card="c8")   # explains c from hour 961 only
    e = lab(5, "m3", 2.0, 9.0, 1, card="c8")     # 18 days before c: explains nothing
    f = lab(6, "m3", 20.5, 27.5, 1, card=None)   # no card: nothing explains it
    g = lab(7, "m5", 20.0, 27.0, 1, card="c8")   # c's very ms: they do not explain each other

    def unexplained(book: MerchantBook, m: str, hour: int) -> int:
        return named(book.vector(m, BASE + hour * HOUR_MS))["merchant_unexplained_30d"]

    book = MerchantBook()
    for x in (a, b, e, c, f, g):
        book.add(x)
    assert unexplained(book, "m1", 300) == 1 and unexplained(book, "m2", 300) == 0
    assert unexplained(book, "m3", 961) == 2  # c and f; e is out of the window (hour 48)
    book.add(d)  # reported at hour 960: it reaches the book after hour 961 was asked for
    assert unexplained(book, "m3", 960) == 2 and unexplained(book, "m3", 961) == 1
    assert [unexplained(book, "m5", h) for h in (960, 961)] == [1, 0]
    table = MerchantTable.of([a, b, c, d, e, f, g])
    hours = [300, 300, 648, 649, 960, 961, 962]
    merchants = ["m1", "m2", "m3", "m3", "m3", "m3", "m3"]
    cols = table.columns(merchants, np.array([BASE + h * HOUR_MS for h in hours]))
    got = cols[MERCHANT_FEATURE_NAMES.index("merchant_unexplained_30d")].tolist()
    assert got == [1, 0, 1, 2, 2, 1, 1]
    assert got == [unexplained(book, m, h) for m, h in zip(merchants, hours, strict=True)]
