"""`fraudstream demo --keep` end to end: one screen, no warnings, a pipeline left to look around."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.harness.pipeline import drop_quietly
from app.harness.procs import free_port, http_ready
from app.settings import Settings, settings_environ

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: One 80x40 terminal with room to spare.
MAX_LINES = 30
MAX_ROWS = 40
NOISE = ("WARNING", "Warning", "Traceback", "Error", "Unclosed", "DeprecationWarning")


def _run(env: dict[str, str], *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli.main", "demo", *args], env=env,
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def test_demo_keep_fits_one_screen_and_leaves_the_pipeline(stack_settings: Settings,
                                                           tmp_path: Path) -> None:
    # Kafka and Redis are named as external services (their local ports moved elsewhere), so
    # the demo starts nothing and writes everything under this test's own state directory.
    settings = stack_settings.replace(state_dir=tmp_path, kafka_port=free_port(),
                                      kafka_controller_port=free_port(),
                                      redis_port=free_port())
    env = settings_environ(settings)
    env.update(COLUMNS="80", LINES="40", PYTHONUNBUFFERED="1")
    kept: dict[str, object] = {}
    try:
        done = _run(env, "--keep", "--cards", "120", "--txns", "2500", timeout_s=300)
        kept_files = list((tmp_path / "demo").glob("*/kept.json"))
        if kept_files:
            kept = json.loads(kept_files[0].read_text())
        out = done.stdout + done.stderr
        print(out)  # shown with -s: the README quotes such a run
        assert done.returncode == 0, out
        lines = out.rstrip("\n").splitlines()
        assert len(lines) <= MAX_LINES, f"{len(lines)} lines:\n{out}"
        rows = sum(max(1, -(-len(line) // 80)) for line in lines)
        assert rows <= MAX_ROWS, f"{rows} rows at 80 columns:\n{out}"
        noisy = [line for line in lines if any(word in line for word in NOISE)]
        assert not noisy, noisy
        assert "every card decided frozen is frozen ✓" in out, out
        # it ends with how to look around, and there is something to look at
        tail = "\n".join(lines[-8:])
        assert "Look around:" in tail and "fraudstream watch --demo" in tail, out
        assert lines[-2].strip().startswith("fraudstream demo --stop"), out
        assert lines[-1].strip().startswith("fraudstream stack down"), out
        assert "(token: " in out and "Authorization: Bearer " in out, out
        assert kept, f"no kept.json under {tmp_path}"
        assert str(kept["service_url"]) in out and str(kept["worker_url"]) in out
        assert http_ready(f"{kept['service_url']}/readyz")
        assert http_ready(f"{kept['worker_url']}/metrics")
    finally:
        stopped = _run(env, "--stop", timeout_s=90)
        if kept:
            drop_quietly(settings.replace(topic_prefix=str(kept["topic_prefix"]),
                                          app_id=str(kept["app_id"])))
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped action service" in stopped.stdout and "worker (pid" in stopped.stdout, \
        stopped.stdout
    assert not list((tmp_path / "demo").glob("*/kept.json"))
