"""Live-stack fixtures: workers, the action service and the quality service started for a
test's settings, logging to its tmp dir, stopped by their PIDs at its end."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from app.harness.procs import (
    Spawned,
    free_port,
    http_ready,
    settings_env,
    spawn_action_service,
    spawn_worker,
    wait_until,
)
from app.settings import Settings
from tests.support.live import StartActionService, StartQuality, StartWorker


@pytest.fixture
def spawned() -> Iterator[list[Spawned]]:
    """Every process this test's factories started, stopped last-first at teardown (SIGTERM,
    SIGKILL after 60 s). A test that reads results once they are gone stops them itself, in
    its order; teardown then stops only what is left, a failed test's processes."""
    procs: list[Spawned] = []
    yield procs
    for proc in reversed(procs):
        proc.stop()


@pytest.fixture
def start_worker(spawned: list[Spawned], tmp_path: Path) -> StartWorker:
    """start_worker(settings, *, name, dispatch, args, port) -> `fraudstream worker` for
    `settings` (app.harness.procs.spawn_worker, in this test's tmp dir)."""

    def start(settings: Settings, *, name: str = "worker", dispatch: bool = True,
              args: Sequence[str] = (), port: int | None = None) -> Spawned:
        worker = spawn_worker(settings, tmp_path, name=name, dispatch=dispatch, args=args,
                              port=port)
        spawned.append(worker)
        return worker

    return start


@pytest.fixture
def start_action_service(spawned: list[Spawned], tmp_path: Path) -> StartActionService:
    """start_action_service(settings, *, port) -> `fraudstream action-service` for `settings`
    (on its port, or `port`), once it answers /readyz (30 s)."""

    def start(settings: Settings, *, port: int | None = None) -> Spawned:
        service = spawn_action_service(settings, tmp_path, port=port)
        spawned.append(service)
        wait_until(lambda: http_ready(f"{settings.action_service_url}/readyz"), timeout_s=30,
                   what="the action service")
        return service

    return start


@pytest.fixture
def start_quality(spawned: list[Spawned], tmp_path: Path) -> StartQuality:
    """start_quality(settings) -> `fraudstream quality` for `settings` on a free port (its
    `port`); not waited for."""

    def start(settings: Settings) -> Spawned:
        port = free_port()
        quality = Spawned([sys.executable, "-m", "app.cli.main", "quality", "--port", str(port)],
                          settings_env(settings), tmp_path / "quality.log", port)
        spawned.append(quality)
        return quality

    return start
