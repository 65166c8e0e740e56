"""Running a worker process: load the model, build the app from Settings, hand it to Faust."""

from __future__ import annotations

import asyncio
import logging

import faust

from app.control.publisher import read_control
from app.kafka.topics import ensure_topics
from app.scoring.contract import ModelError
from app.scoring.registry import LoadedModel, ModelRegistry
from app.settings import Settings
from app.stream import collector
from app.stream.app import AgentName, create_app, worker_datadir
from app.stream.kafka.membership import leave_for_predecessor

log = logging.getLogger(__name__)


class WorkerStartError(RuntimeError):
    """The worker cannot start (no valid model); the message says why."""


def initial_model(settings: Settings, registry: ModelRegistry,
                  activated: str | None) -> LoadedModel:
    """The model to start with.

    The latest activation on the control topic (`activated`) wins; if it does not validate
    here, the worker says so and starts with the configured model (FRAUDSTREAM_MODEL_VERSION or
    models/DEFAULT). A configured model that does not validate stops the worker with the reason.
    """
    if activated is not None:
        try:
            return registry.load(activated)
        except ModelError as exc:
            log.error("activated model %s does not validate here (%s); using the configured one",
                      activated, exc)
    try:
        return registry.load(settings.model_version)
    except ModelError as exc:
        raise WorkerStartError(f"refusing to start: {exc}") from exc


def initial_shadow(registry: ModelRegistry, version: str | None) -> LoadedModel | None:
    """The shadow model set on the control topic (None: none, or it does not validate here:
    said in the log, the worker runs without one)."""
    if version is None:
        return None
    try:
        return registry.load(version)
    except ModelError as exc:
        log.error("shadow model %s does not validate here (%s); running without one",
                  version, exc)
        return None


def run_worker(
    settings: Settings,
    *,
    web_port: int | None = None,
    loglevel: str = "WARNING",
    agents: frozenset[AgentName] = frozenset({"score", "dispatch"}),
) -> None:
    """Block running one worker until SIGTERM/SIGINT (Faust stops cleanly and commits)."""
    asyncio.run(ensure_topics(settings))
    # a crashed predecessor on this data directory leaves the group now, not at its session end
    membership = asyncio.run(leave_for_predecessor(settings, worker_datadir(settings, web_port)))
    model = None
    offset = 0
    shadow: tuple[LoadedModel | None, int] = (None, 0)
    registry = ModelRegistry.from_settings(settings)
    if "score" in agents:
        # one read of the control topic: the activation and shadow in force, and the offset
        # the worker's control follower hands later ones on from
        control, offset = asyncio.run(read_control(settings, timeout_s=30.0))
        model = initial_model(settings, registry, control.activation)
        shadow = (initial_shadow(registry, control.shadow), offset)
    fraud = create_app(settings, web_port=web_port, model=model, load_model=registry.load,
                       control_offset=offset, shadow=shadow, agents=agents)

    @fraud.app.task
    async def report_membership() -> None:  # pragma: no cover - end to end
        # logged here, once Faust has set up the logging
        level = logging.WARNING if membership.startswith("could not") else logging.INFO
        log.log(level, "group membership at start: %s", membership)

    collector.tune()
    worker = faust.Worker(fraud.app, loglevel=loglevel)
    worker.execute_from_commandline()
