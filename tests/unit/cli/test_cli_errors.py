"""Expected failures become one line and exit 1; `-v` keeps the traceback (no network here)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.errors import explain, rule_name
from app.cli.main import cli
from app.settings import SettingsError
from app.transactions.logfile import LogFileError


def _kafka_down() -> BaseException:
    from aiokafka.errors import KafkaConnectionError

    return KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]")


def _redis_down() -> BaseException:
    import redis.exceptions

    return redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:1.")


def _missing_dir() -> BaseException:
    return FileNotFoundError(errno.ENOENT, "No such file or directory", "/nonexistent/dir/x.jsonl")


def _in_use() -> BaseException:
    return OSError(errno.EADDRINUSE, "error while attempting to bind: address already in use")


@pytest.mark.parametrize(("make", "rule", "says"), [
    (_kafka_down, "kafka-unreachable", "run `fraudstream stack up` or set KAFKA_BOOTSTRAP"),
    (_redis_down, "redis-unreachable", "run `fraudstream stack up` or set REDIS_URL"),
    (lambda: LogFileError("x.parquet is not a readable Parquet file (magic)"), "unreadable-log",
     "x.parquet is not a readable Parquet file"),
    (_missing_dir, "missing-path", "directory /nonexistent/dir does not exist"),
    (lambda: PermissionError(errno.EACCES, "Permission denied", "/root/x"), "permission",
     "permission denied: /root/x"),
    (_in_use, "address-in-use", "choose another port"),
    (lambda: SettingsError("environment variable FRAUDSTREAM_PARTITIONS='x': bad"), "settings",
     "FRAUDSTREAM_PARTITIONS"),
    (lambda: TimeoutError("topics not visible after 30s"), "timeout", "stack status"),
])
def test_each_expected_failure_has_one_line(make, rule: str, says: str) -> None:
    exc = make()
    assert rule_name(exc) == rule
    line = explain(exc)
    assert line is not None and says in line and "\n" not in line


def test_a_bug_is_not_explained() -> None:
    assert explain(KeyError("card_id")) is None
    assert explain(ValueError("some internal invariant")) is None


def test_a_wrapped_failure_is_explained_by_its_cause() -> None:
    try:
        try:
            raise _kafka_down()
        except Exception as inner:
            raise RuntimeError("worker could not start") from inner
    except RuntimeError as outer:
        assert "cannot reach Kafka" in (explain(outer) or "")


def _run(args: list[str]) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(cli, args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return result.exit_code, lines, result.stdout


@pytest.fixture
def corrupt_parquet(tmp_path: Path) -> Path:
    path = tmp_path / "txns.parquet"
    path.write_bytes(b"PAR1 not really parquet" * 10)
    return path


def test_corrupt_parquet_to_score_is_one_line(tmp_path: Path, corrupt_parquet: Path) -> None:
    code, lines, _ = _run(["score", "--events", str(corrupt_parquet),
                           "--out", str(tmp_path / "a.jsonl")])
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "is not a readable Parquet file" in lines[0]
    assert not (tmp_path / "a.jsonl").exists()


def test_verbose_keeps_the_traceback(tmp_path: Path, corrupt_parquet: Path) -> None:
    result = CliRunner().invoke(cli, ["-v", "score", "--events", str(corrupt_parquet),
                                      "--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 1
    assert isinstance(result.exception, LogFileError)  # re-raised: Python prints the traceback


def test_generate_into_a_missing_directory_fails_before_work(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "txns.jsonl"
    code, lines, _ = _run(["generate", "--cards", "5", "--txns", "10", "--out", str(out)])
    assert code == 1
    assert lines == [f"Error: --out: directory {out.parent} does not exist: create it "
                     f"(mkdir -p {out.parent}) or choose another path"]


def test_score_of_only_bad_lines_fails_with_a_word(tmp_path: Path) -> None:
    events = tmp_path / "bad.jsonl"
    events.write_bytes(b"not json\n{\"txn_id\": 1}\n")
    out = tmp_path / "actions.jsonl"
    code, lines, _ = _run(["score", "--events", str(events), "--out", str(out)])
    assert code == 1
    assert len(lines) == 1 and "no valid transaction in" in lines[0]
    assert "malformed=2" in lines[0]
    assert not out.exists()


def test_bad_environment_variable_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setenv("FRAUDSTREAM_ALLOWED_LATENESS_MS", "five minutes")
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"x\n")
    code, lines, _ = _run(["score", "--events", str(events), "--out", str(tmp_path / "o.jsonl")])
    assert code == 1
    assert len(lines) == 1 and "FRAUDSTREAM_ALLOWED_LATENESS_MS" in lines[0]


def test_chaos_lists_every_scenario_with_a_description() -> None:
    from app.harness.scenarios import SCENARIOS

    result = CliRunner().invoke(cli, ["chaos", "--list"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(SCENARIOS)
    assert all(spec.about for spec in SCENARIOS.values())
    assert "(no description)" not in result.stdout
