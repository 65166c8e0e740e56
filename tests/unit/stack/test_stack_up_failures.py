"""`stack up` reports every service that cannot come up, not only the first."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.settings import load_settings
from app.stack.kafka import KafkaNode
from app.stack.manager import Stack, StackFailures


@pytest.fixture
def taken_ports() -> Iterator[list[int]]:
    socks = []
    for _ in range(3):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        socks.append(sock)
    try:
        yield [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _env(tmp: Path, ports: list[int]) -> dict[str, str]:
    return {"FRAUDSTREAM_STATE_DIR": str(tmp), "FRAUDSTREAM_REDIS_PORT": str(ports[0]),
            "FRAUDSTREAM_KAFKA_PORT": str(ports[1]),
            "FRAUDSTREAM_KAFKA_CONTROLLER_PORT": str(ports[2])}


def test_both_taken_ports_are_reported(tmp_path: Path, taken_ports: list[int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KafkaNode, "ensure_jars", lambda self: None)
    with pytest.raises(StackFailures) as err:
        Stack(load_settings(_env(tmp_path, taken_ports))).up()
    assert set(err.value.failures) == {"redis", "kafka"}
    assert f"port {taken_ports[0]} is taken" in err.value.failures["redis"]
    assert "REDIS_URL" in err.value.failures["redis"]
    assert f"port {taken_ports[1]} is taken" in err.value.failures["kafka"]
    assert "KAFKA_BOOTSTRAP" in err.value.failures["kafka"]


def test_the_cli_prints_one_line_per_failed_service(tmp_path: Path, taken_ports: list[int],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli.main import cli

    monkeypatch.setattr(KafkaNode, "ensure_jars", lambda self: None)
    for var in ("KAFKA_BOOTSTRAP", "REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    for key, value in _env(tmp_path, taken_ports).items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(cli, ["stack", "up"])
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 2
    assert lines[0].startswith("stack up: redis failed: port")
    assert lines[1].startswith("stack up: kafka failed: port")
