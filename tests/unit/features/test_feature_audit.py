"""The skew audit catches any served value that is not the offline value, bit for bit."""

from __future__ import annotations

from feature_logs import BASE, L, bucketed_count_5m, served_rows, txn

from app.features.audit import ABSENT, audit, same_value
from app.features.offline import compute_features
from app.transactions.contract import Transaction

NOW = BASE + 10**11


def _log() -> list[Transaction]:
    # 70 s apart, so the 5-minute window keeps cutting through minute buckets
    return [txn(f"{c}{i}", BASE + 30_000 + i * 70_000 + c * 5_000, 100 + 13 * i % 7, f"m{i % 3}",
                "FR", f"card{c}") for i in range(15) for c in range(2)]


def test_served_equal_to_offline_passes_including_redeliveries() -> None:
    table = compute_features([t.to_json() for t in _log()], allowed_lateness_ms=L,
                             now_ms=NOW).table
    rows = served_rows(table)
    report = audit([*rows, rows[3], rows[7]], table)
    assert report.ok, report.render()
    assert (report.compared, report.mismatched_rows) == (len(rows) + 2, 0)
    assert report.render().endswith("OK")


def test_bucketed_count_5m_is_caught_feature_by_feature() -> None:
    table = compute_features([t.to_json() for t in _log()], allowed_lateness_ms=L,
                             now_ms=NOW).table
    skewed = bucketed_count_5m(served_rows(table))
    wrong = sum(s["features"]["count_5m"] != e for s, e in
                zip(skewed, table.column("count_5m").to_pylist(), strict=True))
    assert wrong > 0
    report = audit(skewed, table)
    assert not report.ok
    assert dict(report.mismatches) == {"count_5m": wrong}
    example = report.examples["count_5m"][0]
    assert example.served != example.expected
    assert "count_5m: " in report.render() and report.render().endswith("SKEW")


def test_types_and_bits_matter_not_just_equality() -> None:
    assert same_value(5, 5) and same_value(0.1 + 0.2, 0.30000000000000004)
    assert not same_value(5.0, 5)  # a float served for an int64 feature
    assert not same_value(True, 1)
    assert not same_value(0.3, 0.1 + 0.2)
    table = compute_features([txn(1, BASE, 7).to_json()], allowed_lateness_ms=L,
                             now_ms=NOW).table
    (row,) = served_rows(table)
    row["features"]["mean_1m"] = 7  # JSON 7 instead of 7.0
    del row["features"]["ms_since_prev"]
    row["features"]["surprise"] = 1
    report = audit([row], table)
    assert dict(report.mismatches) == {"mean_1m": 1, "ms_since_prev": 1, "surprise": 1}
    assert report.examples["ms_since_prev"][0].served == ABSENT
    assert report.mismatched_rows == 1


def test_missing_and_never_served_and_invalid_rows_fail_the_audit() -> None:
    table = compute_features([txn(i, BASE + i).to_json() for i in range(3)],
                             allowed_lateness_ms=L, now_ms=NOW).table
    rows = served_rows(table)
    stranger = rows[0] | {"txn_id": "ghost"}
    report = audit([rows[0], rows[1], stranger, b"not a row", {"txn_id": "x"}], table)
    assert report.missing_offline == [("card", "ghost")]
    assert report.never_served == [("card", "t2")]
    assert report.invalid_rows == 2
    assert report.compared == 2 and not report.mismatches and not report.ok
