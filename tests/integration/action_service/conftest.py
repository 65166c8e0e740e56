"""Fixtures for the action service's integration tests: a flushed Redis DB 3, apps, clients.

`redis_url` (session-scoped) comes from tests/conftest.py; everything here uses DB 3 of it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from app.action_service.app import create_app
from app.actions import Action, make_action
from app.actions.key import ActionType
from app.harness.redisdb import flush_db, with_db
from app.settings import Settings, load_settings

ACTION_DB = 3
TOKEN = "integration-test-token"
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def action_redis_url(redis_url: str) -> str:
    """`redis_url` rewritten to DB 3, flushed before each test (only that DB)."""
    url = with_db(redis_url, ACTION_DB)
    flush_db(url)
    return url


@pytest.fixture
def make_settings(action_redis_url: str) -> Callable[..., Settings]:
    """Settings for a test service on DB 3, with overrides."""

    def build(**overrides: object) -> Settings:
        # labels_forward off: load_settings({}) would aim the forwarder at the default broker
        values: dict[str, object] = {"redis_url": action_redis_url, "action_token": TOKEN,
                                     "labels_forward": False}
        values.update(overrides)
        return load_settings({}, **values)

    return build


@pytest.fixture
async def redis(action_redis_url: str) -> AsyncIterator[Redis]:
    """A client on the test DB, for assertions on effects and keys."""
    client = Redis.from_url(action_redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def client(make_settings: Callable[..., Settings]) -> AsyncIterator[TestClient]:
    """An in-process action service (default TTL/margin) and an HTTP client for it."""
    async with TestClient(TestServer(create_app(make_settings()))) as test_client:
        yield test_client


def _auth(key: str | None = None, token: str = TOKEN) -> dict[str, str]:
    """Request headers: bearer token and (optionally) the Idempotency-Key."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


@pytest.fixture
def auth() -> Callable[..., dict[str, str]]:
    """auth(key=None, token=TOKEN) -> request headers."""
    return _auth


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _action(
    action_type: ActionType = "freeze_card",
    txn_id: str = "txn-1",
    card_id: str = "card-1",
    *,
    ts_ms: int | None = None,
    score: float = 0.97,
    model_version: str = "m-1",
    decided_at_ms: int | None = None,
) -> Action:
    """A valid action decided now (unless told otherwise)."""
    now = _now_ms()
    return make_action(
        action_type,
        card_id=card_id,
        txn_id=txn_id,
        ts_ms=now - 1000 if ts_ms is None else ts_ms,
        score=score,
        model_version=model_version,
        decided_at_ms=now if decided_at_ms is None else decided_at_ms,
    )


@pytest.fixture
def new_action() -> Callable[..., Action]:
    """new_action(type, txn_id, card_id, *, ts_ms, score, model_version, decided_at_ms)."""
    return _action


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServiceProcess:
    """`fraudstream action-service` as a child process this test owns (killed by its PID)."""

    def __init__(self, port: int, env: dict[str, str]) -> None:
        self.port = port
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0) -> None:
        cmd = [sys.executable, "-m", "app.cli.main", "action-service", "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=self.env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"action service exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)  # poll with a deadline
        raise TimeoutError(f"action service did not listen on {self.port} in {timeout_s} s")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, in-flight requests die with the process."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def terminate(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def _service_env(redis_url: str, **overrides: str) -> dict[str, str]:
    """A test service's environment: Redis at `redis_url`, the test token, no label forwarder."""
    return {
        **os.environ,
        "REDIS_URL": redis_url,
        "FRAUDSTREAM_ACTION_TOKEN": TOKEN,
        "FRAUDSTREAM_LABELS_FORWARD": "0",
        "PYTHONPATH": str(REPO_ROOT),
        **overrides,
    }


@pytest.fixture
def service_process(action_redis_url: str) -> Iterator[Callable[..., ServiceProcess]]:
    """Factory for action-service child processes on DB 3; all are stopped afterwards."""
    spawned: list[ServiceProcess] = []

    def spawn(**env_overrides: str) -> ServiceProcess:
        service = ServiceProcess(free_port(), _service_env(action_redis_url, **env_overrides))
        spawned.append(service)
        return service

    yield spawn
    for service in spawned:
        service.terminate()


@pytest.fixture(scope="module")
def module_service_url(redis_url: str) -> Iterator[str]:
    """One action-service process shared by a module, on DB 3 (flushed before and after)."""
    url = with_db(redis_url, ACTION_DB)
    flush_db(url)
    service = ServiceProcess(free_port(), _service_env(url))
    service.start()
    try:
        yield service.url
    finally:
        service.terminate()
        flush_db(url)


@pytest.fixture(scope="session")
def action_token() -> str:
    """The bearer token every test service is started with."""
    return TOKEN
