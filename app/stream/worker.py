"""Running a worker process: build the app from Settings and hand it to Faust's Worker."""

from __future__ import annotations

import faust

from app.settings import Settings
from app.stream.app import AgentName, create_app


def run_worker(
    settings: Settings,
    *,
    web_port: int | None = None,
    loglevel: str = "WARNING",
    agents: frozenset[AgentName] = frozenset({"score", "dispatch"}),
) -> None:
    """Block running one worker until SIGTERM/SIGINT (Faust stops cleanly and commits)."""
    fraud = create_app(settings, web_port=web_port, agents=agents)
    worker = faust.Worker(fraud.app, loglevel=loglevel)
    worker.execute_from_commandline()
