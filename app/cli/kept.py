"""What `fraudstream demo --keep` leaves running: recorded by PID, described, stopped again."""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from app.stack.process import command_shows, terminate

#: One file per kept demo run, under <state dir>/demo/<run>/.
KEPT_FILE = "kept.json"
#: What a kept process's command line shows while it is still ours (not a reused PID).
MARKERS: Final = ("app.cli.main",)


@dataclass(frozen=True, slots=True)
class KeptRun:
    """A demo run whose worker and action service keep running after the demo returns."""

    workdir: str
    topic_prefix: str
    app_id: str
    service_url: str
    worker_url: str
    pids: dict[str, int]

    def save(self) -> Path:
        path = Path(self.workdir) / KEPT_FILE
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    def env_prefix(self) -> str:
        """The variables that point a command at this run's topics and consumer group."""
        return f"FRAUDSTREAM_TOPIC_PREFIX={self.topic_prefix} FRAUDSTREAM_APP_ID={self.app_id}"

    def look_around(self, token: str, card_id: str | None) -> list[str]:
        """The lines the demo ends with: where things are and the next commands (files: above);
        as many lines as fit the demo's one screen (tests/integration/cli/test_demo.py)."""
        card = card_id or "<card_id>"
        return [
            f"action service  {self.service_url}  (token: {token}; pid {self.pids['action service']})",
            f"worker          {self.worker_url}/metrics  (pid {self.pids['worker']})",
            "Look around:",
            "  fraudstream watch --demo   # live: events/s, lag, latency per hop, effects",
            f"  curl -s -H 'Authorization: Bearer {token}' {self.service_url}/v1/cards/{card}",
            f"  curl -s {self.worker_url}/metrics | grep fraudstream_hop_seconds_count",
            # lists, rules and reviews find the action service by this variable (a random port)
            f"  export FRAUDSTREAM_ACTION_SERVICE_URL={self.service_url}; fraudstream lists show",
            "  fraudstream demo --stop   # stops the worker and the action service",
            "  fraudstream stack down    # then Kafka and Redis",
        ]


def kept_runs(state_dir: Path) -> list[KeptRun]:
    """Every demo run recorded as kept under `state_dir`."""
    runs = []
    for path in sorted((state_dir.resolve() / "demo").glob(f"*/{KEPT_FILE}")):
        with contextlib.suppress(ValueError, TypeError, OSError):
            runs.append(KeptRun(**json.loads(path.read_text())))
    return runs


def stop_run(run: KeptRun, timeout_s: float = 30.0) -> list[str]:
    """SIGTERM the run's recorded PIDs (only while they still run our command), SIGKILL after
    the timeout, then forget the run."""
    stopped = []
    for name, pid in run.pids.items():
        if not command_shows(pid, MARKERS):
            continue
        with contextlib.suppress(ProcessLookupError):  # it exited since we looked
            terminate(pid, name, timeout_s=timeout_s)
        stopped.append(f"{name} (pid {pid})")
    (Path(run.workdir) / KEPT_FILE).unlink(missing_ok=True)
    return stopped
