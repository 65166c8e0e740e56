"""`fraudstream generate`: files, determinism, Parquet, the summary and clear refusals."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow.parquet as pq
from click.testing import CliRunner

from app.cli.main import cli
from app.transactions.contract import FIELDS

ARGS = ["generate", "--cards", "60", "--txns", "1500", "--seed", "3"]


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*ARGS, *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_same_arguments_give_byte_identical_files(tmp_path: Path) -> None:
    noise = ["--out-of-order", "0.05", "--redelivery", "0.02", "--malformed", "0.02"]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    code, out = _run("--out", str(a), "--labels", str(tmp_path / "a.labels"), *noise)
    assert code == 0, out
    assert _run("--out", str(b), "--labels", str(tmp_path / "b.labels"), *noise)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    assert (tmp_path / "a.labels").read_bytes() == (tmp_path / "b.labels").read_bytes()
    lines = a.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == 1500 + 30 + 30
    assert "malformed messages" in out and "rate (events/s" in out
    assert "1,560" in out  # the line count in the summary
    assert not list(tmp_path.glob(".*.tmp"))  # writes are atomic


def test_labels_default_next_to_the_output(tmp_path: Path) -> None:
    out = tmp_path / "txns.jsonl"
    assert _run("--out", str(out))[0] == 0
    labels = (tmp_path / "txns.labels.jsonl").read_bytes().split(b"\n")[:-1]
    assert len(labels) == 1500
    assert set(orjson.loads(labels[0])) == {"txn_id", "label", "label_ts_ms", "merchant_id", "ts_ms"}


def test_parquet_has_one_column_per_contract_field(tmp_path: Path) -> None:
    jsonl, parquet = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    assert _run("--out", str(jsonl), "--redelivery", "0.01")[0] == 0
    assert _run("--out", str(parquet), "--redelivery", "0.01")[0] == 0
    table = pq.read_table(parquet)
    assert tuple(table.column_names) == FIELDS
    rows = [orjson.loads(line) for line in jsonl.read_bytes().split(b"\n")[:-1]]
    assert table.to_pylist() == rows


def test_parquet_with_malformed_is_refused(tmp_path: Path) -> None:
    code, out = _run("--out", str(tmp_path / "t.parquet"), "--malformed", "0.01")
    assert code == 2
    assert "Parquet cannot hold malformed messages" in out
    assert not (tmp_path / "t.parquet").exists()


def test_bad_start_and_impossible_fraud_budget_are_usage_errors(tmp_path: Path) -> None:
    code, out = _run("--out", str(tmp_path / "t.jsonl"), "--start", "last tuesday")
    assert code == 2 and "neither an ISO date" in out
    result = CliRunner().invoke(cli, ["generate", "--cards", "5", "--txns", "3",
                                      "--fraud-rate", "0.5", "--out", str(tmp_path / "x.jsonl")])
    assert result.exit_code == 2 and "raise txns or lower fraud_rate" in result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_start_accepts_epoch_ms(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    assert _run("--out", str(out), "--start", "1700000000000", "--days", "1")[0] == 0
    ts = [orjson.loads(line)["ts_ms"] for line in out.read_bytes().split(b"\n")[:-1]]
    assert 1_700_000_000_000 <= min(ts) and max(ts) < 1_700_000_000_000 + 86_400_000
