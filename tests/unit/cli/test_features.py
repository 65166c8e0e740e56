"""Smoke tests of `fraudstream features | training-set | audit-skew` on small files."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.features.declaration import FEATURE_NAMES
from app.features.offline import compute_features, feature_schema
from tests.unit.features.feature_logs import BASE, L, bucketed_count_5m, served_rows, txn

NOW = BASE + 10**11
COMMON = ["--lateness-ms", str(L), "--now", str(NOW)]


@pytest.fixture
def events(tmp_path: Path) -> Path:
    log = [txn(f"{c}-{i}", BASE + i * 45_000 + c * 1_000, 50 + i, f"m{i % 4}", "FR", f"card{c}")
           for i in range(20) for c in range(3)]
    lines = [t.to_json() for t in log]
    lines.insert(10, lines[4])  # an upstream retry
    lines.insert(20, txn("old", BASE - L - 1, card="card0").to_json())  # late
    lines.insert(30, b'{"oops": 1}')
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result.exit_code, result.output


def test_features_writes_parquet_and_jsonl_and_prints_counts(events: Path, tmp_path: Path) -> None:
    code, out = _run(["features", "--events", str(events), "--out", str(tmp_path / "f.parquet"),
                      *COMMON])
    assert code == 0, out
    assert "accepted=60 late=1 redelivered=1 malformed=1 (missing_field=1)" in out
    assert "events/s" in out
    table = pq.read_table(tmp_path / "f.parquet")
    assert table.schema == feature_schema()
    assert table.num_rows == 60

    parquet_events = tmp_path / "events.parquet"
    rows = [orjson.loads(line) for line in events.read_bytes().splitlines()]
    pq.write_table(pa.Table.from_pylist([r for r in rows if "oops" not in r]), parquet_events)
    code, out = _run(["features", "--events", str(parquet_events), "--out",
                      str(tmp_path / "f.jsonl"), *COMMON])
    assert code == 0, out
    back = [orjson.loads(line) for line in (tmp_path / "f.jsonl").read_bytes().splitlines()]
    assert repr(back) == repr(table.to_pylist())


def test_features_rejects_unknown_formats(events: Path, tmp_path: Path) -> None:
    code, out = _run(["features", "--events", str(events), "--out", str(tmp_path / "f.csv"),
                      *COMMON])
    assert code == 2 and "unknown output format" in out


def test_training_set_joins_labels_and_reports_the_rest(events: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b"\n".join(orjson.dumps(x) for x in [
        {"txn_id": "t0-5", "label": 1, "label_ts_ms": BASE + 10},
        {"txn_id": "t1-7", "label": 0, "label_ts_ms": BASE + 99},
        {"txn_id": "told", "label": 1, "label_ts_ms": BASE},
        {"txn_id": "t-none", "label": 0, "label_ts_ms": BASE},
    ]))
    out_path = tmp_path / "train.parquet"
    code, out = _run(["training-set", "--events", str(events), "--labels", str(labels),
                      "--out", str(out_path), "--as-of", str(BASE + 50), *COMMON])
    assert code == 0, out
    assert "labels joined=1 after_as_of=1 not_joined=2 (late=1 malformed=0 unknown=1" in out
    table = pq.read_table(out_path)
    assert table.column_names == ["txn_id", "ts_ms", "card_id", *FEATURE_NAMES, "label"]
    assert table.column("txn_id").to_pylist() == ["t0-5"]

    labels.write_bytes(b'{"txn_id": "t0-5", "label": "yes", "label_ts_ms": 1}\n')
    code, out = _run(["training-set", "--events", str(events), "--labels", str(labels),
                      "--out", str(out_path), *COMMON])
    assert code == 2 and "labels.jsonl:1: label: must be 0, 1" in out


def _served_file(events: Path, tmp_path: Path, skew: bool) -> Path:
    table = compute_features(events.read_bytes().splitlines(), allowed_lateness_ms=L,
                             now_ms=NOW).table
    rows = served_rows(table)
    rows = bucketed_count_5m(rows) if skew else rows + rows[:2]  # two served twice
    path = tmp_path / ("skewed.jsonl" if skew else "served.jsonl")
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def test_audit_skew_passes_on_faithful_serving(events: Path, tmp_path: Path) -> None:
    code, out = _run(["audit-skew", "--served", str(_served_file(events, tmp_path, False)),
                      "--events", str(events), *COMMON])
    assert code == 0, out
    assert "compared 62 served rows: 0 with mismatches" in out and out.rstrip().endswith("OK")


def test_audit_skew_fails_on_bucketed_count_5m(events: Path, tmp_path: Path) -> None:
    code, out = _run(["audit-skew", "--served", str(_served_file(events, tmp_path, True)),
                      "--events", str(events), *COMMON])
    assert code == 1, out
    assert re.search(r"compared 60 served rows: [1-9]\d* with mismatches", out)
    assert re.search(r"count_5m: [1-9]\d* mismatches\n    txn \S+ \(card \S+\): served \d+, "
                     r"expected \d+", out)
    assert "count_1m:" not in out and out.rstrip().endswith("SKEW")


def test_audit_skew_reads_a_topic_when_served_is_not_a_file(
    events: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.stream.engine.served as served_module

    rows = [orjson.loads(line) for line in
            _served_file(events, tmp_path, False).read_bytes().splitlines()]
    asked: list[str] = []

    def fake_iter(settings, topic):
        asked.append(topic)
        yield from rows[:-5]  # the last three rows' txns were never served

    monkeypatch.setattr(served_module, "iter_served_rows", fake_iter)
    code, out = _run(["audit-skew", "--served", "features.served", "--events", str(events),
                      *COMMON])
    assert asked == ["features.served"]
    assert code == 1 and "offline but never served: 3" in out
