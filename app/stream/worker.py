"""Running a worker process: load the model, build the app from Settings, hand it to Faust."""

from __future__ import annotations

import asyncio
import logging

import faust

from app.kafka.topics import ensure_topics
from app.scoring.contract import ModelError
from app.scoring.registry import LoadedModel, ModelRegistry
from app.settings import Settings
from app.stream import collector
from app.stream.app import AgentName, create_app, worker_datadir
from app.stream.control import latest_activation
from app.stream.membership import leave_for_predecessor

log = logging.getLogger(__name__)


class WorkerStartError(RuntimeError):
    """The worker cannot start (no valid model); the message says why."""


def initial_model(settings: Settings, registry: ModelRegistry) -> tuple[LoadedModel, int]:
    """The model to start with and the control-topic offset to follow from.

    The latest activation on the control topic wins; if it does not validate here, the worker
    says so and starts with the configured model (FRAUDSTREAM_MODEL_VERSION or models/DEFAULT).
    A configured model that does not validate stops the worker with the reason.
    """
    activated, offset = asyncio.run(latest_activation(settings))
    if activated is not None:
        try:
            return registry.load(activated), offset
        except ModelError as exc:
            log.error("activated model %s does not validate here (%s); using the configured one",
                      activated, exc)
    try:
        return registry.load(settings.model_version), offset
    except ModelError as exc:
        raise WorkerStartError(f"refusing to start: {exc}") from exc


def initial_shadow(settings: Settings, registry: ModelRegistry
                   ) -> tuple[LoadedModel | None, int]:
    """The shadow model set on the control topic (None: none, or it does not validate here:
    said in the log, the worker runs without one) and the offset to follow shadow changes from."""
    from app.stream.shadow import latest_shadow

    version, offset = asyncio.run(latest_shadow(settings))
    if version is None:
        return None, offset
    try:
        return registry.load(version), offset
    except ModelError as exc:
        log.error("shadow model %s does not validate here (%s); running without one",
                  version, exc)
        return None, offset


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
        model, offset = initial_model(settings, registry)
        shadow = initial_shadow(settings, registry)
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
