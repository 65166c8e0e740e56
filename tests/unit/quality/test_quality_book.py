"""The quality join: a label counts at a maturity only if reported by then, the latest label
wins, a card's label covers its transactions without one, a label_id counts once, and every
figure is the plain count."""

from __future__ import annotations

from app.quality.book import DAY_MS, QualityBook, day_of
from app.quality.exporter import QualityCollector
from app.transactions.labels import LabelRecord

T0 = 1_767_225_600_000  # 2026-01-01T00:00Z


def _label(txn: str | None, label: int, at: int, *, card: str | None = None,
           label_id: str | None = None) -> LabelRecord:
    return LabelRecord(label_id or f"{txn}-{card}-{label}-{at}", txn, card, label, at, "test")


def _book() -> QualityBook:
    book = QualityBook(keep_days=0)
    for i, card in enumerate(("c1", "c1", "c2", "c3", "c4")):
        book.served(f"t{i}", card, T0 + i * 1000)
    book.served("t0", "c1", T0)  # a redelivered copy: once
    book.served("t9", "c9", T0 + 2 * DAY_MS)  # another day
    for txn, card in (("t0", "c1"), ("t1", "c1"), ("t3", "c3"), ("t9", "c9")):
        ts = book.txns[txn][1]
        book.action("freeze_card", txn, card, ts)
        book.action("alert_customer", txn, card, ts)  # alerts do not count as freezes
    book.action("freeze_card", "t0", "c1", T0)  # a redelivered freeze
    book.label(_label("t0", 1, T0 + 2 * DAY_MS))  # fraud, known after 2 days
    book.label(_label("t1", 1, T0 + DAY_MS // 2))
    book.label(_label("t1", 0, T0 + 3 * DAY_MS))  # ... released later: legitimate
    book.label(_label("t2", 1, T0 + 40 * DAY_MS))  # fraud never frozen, known after 40 days
    book.label(_label(None, 1, T0 + 1, card="c4"))  # the card: its transaction t4
    book.label(_label(None, 1, T0 + 1, card="c4"))  # the same label_id again
    return book


def test_maturity_counts_only_labels_reported_by_then():
    quality = _book().quality()
    day = day_of(T0)
    one, week, month, every = (quality.at(day, m) for m in ("1d", "7d", "30d", "all"))
    assert one.freezes == week.freezes == every.freezes == 3  # t0, t1, t3
    # 1d: t1 fraud (released only later), t4 by its card
    assert (one.fraud, one.fraud_frozen) == (2, 1)
    # 7d: t0 fraud, t1 released, t4
    assert (week.fraud, week.fraud_frozen) == (2, 1)
    assert (month.fraud, month.fraud_frozen) == (2, 1)
    # all: t2 too
    assert (every.fraud, every.fraud_frozen) == (3, 1)
    assert every.precision == 1 / 3 and every.recall == 1 / 3
    assert quality.labels == 5
    later = quality.at(day_of(T0 + 2 * DAY_MS))
    assert (later.freezes, later.fraud, later.precision, later.recall) == (1, 0, 0.0, None)
    total = quality.at("all")
    assert (total.freezes, total.fraud, total.fraud_frozen) == (4, 3, 1)


def test_old_days_are_forgotten():
    book = _book()
    book.keep_days = 1
    book.forget_old()
    assert set(book.txns) == {"t9"} and set(book.frozen) == {"t9"}
    assert book.quality().at("all").freezes == 1


def test_the_collector_exports_every_day_and_maturity():
    collector = QualityCollector()
    collector.update(_book())
    families = {f.name: f for f in collector.collect()}
    samples = {(s.labels["day"], s.labels["maturity"]): s.value
               for s in families["fraudstream_quality_precision"].samples}
    assert samples[("all", "all")] == 0.25 and samples[(day_of(T0), "all")] == 1 / 3
    recall = {(s.labels["day"], s.labels["maturity"]) for s in
              families["fraudstream_quality_recall"].samples}
    assert (day_of(T0 + 2 * DAY_MS), "all") not in recall  # no fraud that day: no ratio
