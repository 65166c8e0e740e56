"""`fraudstream stack --profile secure`: the secure stack under `stack`, with `status`, reporting
on stdout like the other profiles; `secure-stack` is its old name."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.kafka.topics import TopicPlan
from app.stack.manager import UpReport
from app.stack.secure import SecureStack


@pytest.fixture
def state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("KAFKA_BOOTSTRAP", "REDIS_URL", "FRAUDSTREAM_STACK_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FRAUDSTREAM_STATE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("argv", [
    ["stack", "status", "--profile", "secure"],
    ["stack", "--profile", "secure", "status"],
    ["secure-stack", "status"],
])
def test_secure_status_is_a_table_on_stdout(state_dir: Path, argv: list[str]) -> None:
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert "profile: secure" in result.stdout and "kafka" in result.stdout
    assert result.stderr == ""


def test_secure_env_names_secret_files_only(state_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["stack", "env", "--profile", "secure"])
    assert result.exit_code == 0
    assert "export FRAUDSTREAM_KAFKA_SECURITY_PROTOCOL=SASL_SSL" in result.stdout
    assert f"FRAUDSTREAM_REDIS_PASSWORD_FILE={state_dir.resolve()}/secure/" in result.stdout
    secret = (state_dir / "secure" / "secrets" / "redis-client-password").read_text().strip()
    assert secret not in result.stdout


def test_secure_up_reports_on_stdout_and_says_how_clients_connect(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SecureStack, "up", lambda self: UpReport(
        ("redis", "kafka"), TopicPlan(("transactions",), ()), {"total": 1.5}))
    result = CliRunner().invoke(cli, ["stack", "up", "--profile", "secure"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert "started: redis, kafka; topics created: 1" in result.stdout
    assert "profile: secure" in result.stdout
    assert 'eval "$(fraudstream stack env --profile secure)"' in result.stdout
    assert f"{state_dir.resolve()}/secure" in result.stdout


def test_a_subcommand_profile_overrides_the_group_one(state_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["stack", "--profile", "secure", "status", "--profile",
                                      "single"])
    assert result.exit_code == 0 and "profile: single" in result.stdout
