"""`fraudstream watch --once` against a running worker and action service on fresh topics."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from app.harness.pipeline import (
    lines_of,
    make_log,
    replay_and_settle,
    run_counts,
    with_own_service,
)
from app.harness.procs import http_ready, wait_until
from app.settings import Settings
from tests.support.live import StartActionService, StartWorker, metrics_page, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WATCH_REDIS_DB = 7


def test_watch_shows_the_running_pipeline(fresh_settings: Settings,
                                          start_action_service: StartActionService,
                                          start_worker: StartWorker) -> None:
    settings = with_own_service(fresh_settings, WATCH_REDIS_DB)
    service = start_action_service(settings, port=settings.action_service_port)
    worker = start_worker(settings)
    wait_until(lambda: http_ready(f"http://127.0.0.1:{worker.port}/metrics"), timeout_s=60,
               what="the worker's metrics page")
    log = make_log(cards=40, txns=600, malformed=0.05)
    lines = lines_of(log)
    replay_and_settle(settings, [worker], lines)  # every effect applied before watch reads
    text = metrics_page(worker.port, timeout_s=5)
    capture = os.environ.get("FRAUDSTREAM_CAPTURE_METRICS")
    if capture:  # refreshes tests/unit/watch/worker_metrics.txt by hand
        Path(capture).write_text(text)
    done = run_cli(settings, "watch", "--once", "--interval", "0.5",
                   "--worker", f"http://127.0.0.1:{worker.port}",
                   "--action-service", settings.action_service_url,
                   timeout_s=60, env={"COLUMNS": "160"})
    worker.stop(timeout_s=30)
    service.stop(timeout_s=30)
    out = done.stdout
    print(out)  # shown with -s: the screen the README quotes
    assert done.returncode == 0, done.stderr
    assert "workers 1/1" in out and "lag 0 msgs" in out, out
    version = Path("models/DEFAULT").read_text().strip()
    assert f"{version} on CPUExecutionProvider" in out or f"{version} on CUDA" in out, out
    for hop in ("append_to_engine", "features", "model", "event_to_served", "event_to_effect"):
        assert hop in out
    # the counts it shows are the ones the run produced (topics, ledger, oracle)
    did = run_counts(settings, lines, malformed=log.counts.malformed)
    outcomes = next(line for line in out.splitlines() if line.startswith("scored "))
    shown = {name: int(value.replace(",", "")) for name, value in re.findall(
        r"(scored|dead-lettered|late|effects applied) ([\d,]+)", outcomes)}
    assert shown == {"scored": did.scored, "dead-lettered": did.dead_lettered,
                     "late": did.late, "effects applied": did.effects}, (outcomes, did)
    assert "did not answer" not in out, out
    # the drift table: counted against the model's reference (a few hundred events: n/a or PSI)
    assert f"drift vs training reference of {version}" in out, out
