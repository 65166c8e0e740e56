"""Point-in-time training sets: a label sees its transaction's served vector, nothing later."""

from __future__ import annotations

import orjson
import pytest
from feature_logs import BASE, L, txn

from app.features.declaration import FEATURE_NAMES
from app.features.offline import compute_features
from app.features.training_set import COLUMNS, Label, build_training_set, parse_label

NOW = BASE + 10**11


def _offline(log):
    return compute_features([t.to_json() for t in log], allowed_lateness_ms=L, now_ms=NOW)


def test_label_gets_features_as_of_its_transaction_never_later_events() -> None:
    before = [txn("a", BASE, 100), txn("b", BASE + 10_000, 200)]
    x = txn("x", BASE + 20_000, 300)
    # after x in the log: a later ts, an equal ts, and an earlier ts within L (out of order)
    after = [txn("c", BASE + 25_000, 5_000), txn("d", BASE + 20_000, 7_000),
             txn("e", BASE + 15_000, 9_000)]
    full = build_training_set(_offline([*before, x, *after]), [Label("tx", 1, NOW)])
    cut = build_training_set(_offline([*before, x]), [Label("tx", 1, NOW)])
    assert full.table.column_names == list(COLUMNS)
    assert full.table.to_pylist() == cut.table.to_pylist()
    row = full.table.to_pylist()[0]
    assert (row["count_1m"], row["sum_1m"], row["max_1m"], row["label"]) == (3, 600, 300, 1)
    # d (same ts as x, after it in the log) does see x; c (later ts) counts for neither
    other = build_training_set(_offline([*before, x, *after]), [Label("td", 0, NOW)])
    assert other.table.to_pylist()[0]["count_1m"] == 4


def test_as_of_keeps_only_labels_known_by_then_and_unmatched_are_counted() -> None:
    log = [txn(i, BASE + i * 1_000) for i in range(5)]
    late = txn("late", BASE - L - 10_000)
    bad = orjson.loads(txn("bad", BASE).to_json()) | {"amount_minor": 0}
    offline = compute_features([*(t.to_json() for t in [*log, late]), orjson.dumps(bad)],
                               allowed_lateness_ms=L, now_ms=NOW)
    labels = [Label("t0", 0, 100), Label("t1", 1, 200), Label("t3", 1, 300),
              Label("tlate", 1, 50), Label("tbad", 1, 50), Label("nope", 0, 50)]
    ts = build_training_set(offline, labels, as_of_ms=200)
    assert ts.table.column("txn_id").to_pylist() == ["t0", "t1"]
    assert ts.table.column("label").to_pylist() == [0, 1]
    assert ts.after_as_of == 1
    assert ts.unmatched == {"late": 1, "malformed": 1, "unknown": 1, "ambiguous": 0}
    assert ts.table.schema.field("label").type == "int64"
    assert ts.table.column_names[3:-1] == list(FEATURE_NAMES)


def test_labels_are_validated_with_clear_errors() -> None:
    assert parse_label(b'{"txn_id": "t", "label": true, "label_ts_ms": 5}') == Label("t", 1, 5)
    with pytest.raises(ValueError, match="exactly txn_id, label, label_ts_ms"):
        parse_label(b'{"txn_id": "t", "label": 1}')
    with pytest.raises(ValueError, match="label must be 0, 1"):
        parse_label(b'{"txn_id": "t", "label": 2, "label_ts_ms": 5}')
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_label(b"{")
