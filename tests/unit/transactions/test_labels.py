"""The label contract: one row checked, each mistake named by its field; ids deterministic."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.transactions.labels import LabelError, LabelRecord, label_id, parse_label_row

NOW = 1_760_000_000_000


def test_a_txn_label_with_ms_and_one_with_iso_time():
    a = parse_label_row({"txn_id": "t-1", "label": 1, "reported_at": NOW - 5}, now_ms=NOW)
    assert (a.txn_id, a.card_id, a.label, a.reported_at_ms, a.source) == (
        "t-1", None, 1, NOW - 5, "import")
    b = parse_label_row({"card_id": "c-1", "label": False, "reported_at": "2025-10-09T08:53:20Z",
                         "source": "chargeback"}, now_ms=NOW)
    assert b.reported_at_ms == 1_760_000_000_000 and b.label == 0
    assert b.key == b"c-1" and a.key == b"t-1"
    assert LabelRecord.from_json(b.to_json()) == b


def test_the_generators_label_files_are_accepted():
    row = {"txn_id": "t-1", "label": 1, "label_ts_ms": NOW}
    assert parse_label_row(row, now_ms=NOW).reported_at_ms == NOW


def test_parquet_values_nulls_and_datetimes():
    row = {"txn_id": "t-2", "card_id": None, "label": 1,
           "reported_at": datetime(2025, 10, 9, 8, 53, 20, 1000, tzinfo=UTC)}
    assert parse_label_row(row, now_ms=NOW).reported_at_ms == 1_760_000_000_001


def test_label_id_is_deterministic_and_covers_the_content():
    a = parse_label_row({"txn_id": "t", "label": 1, "reported_at": NOW}, now_ms=NOW)
    assert a.label_id == parse_label_row({"txn_id": "t", "label": 1, "reported_at": NOW},
                                         now_ms=NOW).label_id
    assert a.label_id != label_id("t", None, 0, NOW, "import")
    assert len(a.label_id) == 32


@pytest.mark.parametrize(("row", "field"), [
    ([1, 2], None),
    ({"label": 1, "reported_at": NOW}, "txn_id"),
    ({"txn_id": "bad id", "label": 1, "reported_at": NOW}, "txn_id"),
    ({"txn_id": "t", "card_id": 5, "label": 1, "reported_at": NOW}, "card_id"),
    ({"txn_id": "t", "reported_at": NOW}, "label"),
    ({"txn_id": "t", "label": 2, "reported_at": NOW}, "label"),
    ({"txn_id": "t", "label": "1", "reported_at": NOW}, "label"),
    ({"txn_id": "t", "label": 1}, "reported_at"),
    ({"txn_id": "t", "label": 1, "reported_at": "yesterday"}, "reported_at"),
    ({"txn_id": "t", "label": 1, "reported_at": "2025-10-09T08:53:20"}, "reported_at"),
    ({"txn_id": "t", "label": 1, "reported_at": 1.5e12}, "reported_at"),
    ({"txn_id": "t", "label": 1, "reported_at": 5}, "reported_at"),
    ({"txn_id": "t", "label": 1, "reported_at": NOW + 2 * 86_400_000}, "reported_at"),
    ({"txn_id": "t", "label": 1, "reported_at": NOW, "source": ""}, "source"),
    ({"txn_id": "t", "label": 1, "reported_at": NOW, "amount": 3}, "amount"),
    ({"txn_id": "t", "label": 1, "reported_at": NOW, "label_ts_ms": NOW}, "label_ts_ms"),
    ({"txn_id": "t", "label": 1, "label_ts_ms": "2025-10-09T08:53:20Z"}, "label_ts_ms"),
])
def test_each_mistake_names_its_field(row, field):
    with pytest.raises(LabelError) as info:
        parse_label_row(row, now_ms=NOW)
    assert info.value.field == field
    assert "\n" not in info.value.reason
    if field:
        assert info.value.reason.startswith(f"{field}:")
