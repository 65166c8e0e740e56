"""A new user's mistakes, each run as the real command: one line on stderr and exit 1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.harness.procs import free_port
from app.settings import Settings, settings_environ

pytestmark = pytest.mark.integration

KAFKA_HINT = "run `fraudstream stack up` or set KAFKA_BOOTSTRAP"


@dataclass(frozen=True)
class Mistake:
    """One mistake: the command line (built in a tmp dir), what the one line says, the exit."""

    name: str
    argv: Callable[[Path], list[str]]
    says: str
    kafka_down: bool = False
    exit_code: int = 1
    #: services keep aiokafka's own log lines (operators read them); the error is still last
    service: bool = False


def _corrupt(tmp: Path) -> Path:
    path = tmp / "txns.parquet"
    path.write_bytes(os.urandom(300))
    return path


def _jsonl(tmp: Path, body: bytes = b'{"txn_id": "t1"}\n') -> Path:
    path = tmp / "txns.jsonl"
    path.write_bytes(body)
    return path


MISTAKES = [
    Mistake("replay, Kafka down", lambda t: ["replay", "--events", str(_jsonl(t))], KAFKA_HINT, True),
    Mistake("model activate, Kafka down",
            lambda t: ["model", "activate", "--model", Path("models/DEFAULT").read_text().strip()],
            KAFKA_HINT, True),
    Mistake("topics, Kafka down", lambda t: ["topics"], KAFKA_HINT, True),
    Mistake("worker, Kafka down", lambda t: ["worker", "--web-port", str(free_port())],
            KAFKA_HINT, True, service=True),
    Mistake("score, corrupt parquet",
            lambda t: ["score", "--events", str(_corrupt(t)), "--out", str(t / "a.jsonl")],
            "is not a readable Parquet file"),
    Mistake("replay, corrupt parquet", lambda t: ["replay", "--events", str(_corrupt(t))],
            "is not a readable Parquet file"),
    Mistake("generate into a missing directory",
            lambda t: ["generate", "--txns", "10", "--cards", "5", "--out", str(t / "no/x.jsonl")],
            "does not exist: create it (mkdir -p"),
    Mistake("score, only bad lines",
            lambda t: ["score", "--events", str(_jsonl(t, b"nope\n")), "--out", str(t / "a.jsonl")],
            "no valid transaction in"),
    Mistake("score --out into a missing directory",
            lambda t: ["score", "--events", str(_jsonl(t)), "--out", str(t / "no/a.jsonl")],
            "does not exist: create it"),
]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _closed_port() -> int:
    return free_port()  # bound and released: nothing listens there


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli.main", *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def _env(settings: Settings, tmp: Path, **extra: str) -> dict[str, str]:
    env = settings_environ(settings.replace(state_dir=tmp / "state", model_dir=Path.cwd() / "models",
                                            topic_prefix=f"mistake-{os.getpid()}.",
                                            app_id=f"mistake-{os.getpid()}"))
    env["PYTHONPATH"] = str(Path.cwd())
    env.update(extra)
    return env


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_mistake_is_one_line(mistake: Mistake, stack_settings: Settings, tmp_path: Path) -> None:
    extra = {"KAFKA_BOOTSTRAP": f"127.0.0.1:{_closed_port()}"} if mistake.kafka_down else {}
    argv = mistake.argv(tmp_path)
    done = _run(argv, _env(stack_settings, tmp_path, **extra), Path.cwd())
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == mistake.exit_code, done.stderr
    assert "Traceback" not in done.stderr
    if not mistake.service:
        assert len(lines) == 1, done.stderr
    assert lines[-1].startswith("Error: ") and mistake.says in lines[-1], lines[-1]


def test_action_service_on_a_busy_port(stack_settings: Settings, tmp_path: Path,
                                       busy_port: int) -> None:
    done = _run(["action-service", "--port", str(busy_port)], _env(stack_settings, tmp_path),
                Path.cwd())
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr
    assert lines[-1].startswith("Error: ") and "address already in use" in lines[-1]
    assert "Traceback" not in done.stderr


def test_verbose_shows_the_traceback(stack_settings: Settings, tmp_path: Path) -> None:
    env = _env(stack_settings, tmp_path, KAFKA_BOOTSTRAP=f"127.0.0.1:{_closed_port()}")
    done = _run(["-v", "topics"], env, Path.cwd())
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "KafkaConnectionError" in done.stderr
