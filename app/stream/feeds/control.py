"""Model rollout: a model named on the control topic (app.stream.feeds.controlfeed) is loaded and
validated in a thread, then offered to the scoring stage; one that fails keeps the current one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from app.scoring.registry import LoadedModel

log = logging.getLogger(__name__)


async def validated_model(load: Callable[[str], LoadedModel], version: str, counter: Any,
                          refused: str) -> LoadedModel | None:
    """Load and validate `version` in a thread (a session build never stalls the loop); count
    it on `counter` (`accepted` / `refused`), and log `refused` (%s: version, reason) and
    return None when it fails validation."""
    from app.scoring.contract import ModelError

    try:
        model = await asyncio.to_thread(load, version)
    except (ModelError, OSError, ValueError) as exc:
        counter.labels("refused").inc()
        log.error(refused, version, exc)
        return None
    counter.labels("accepted").inc()
    return model


def activation_handler(
    load: Callable[[str], LoadedModel], offer: Callable[[LoadedModel], None]
) -> Callable[[str], Awaitable[None]]:
    """Validate a published version, then offer it to the scoring stage; a model that fails
    validation is refused and logged, and the current one keeps serving."""
    from app.stream import metrics

    async def handle(version: str) -> None:
        model = await validated_model(load, version, metrics.MODEL_ACTIVATIONS,
                                      "model %s refused, the current model keeps serving: %s")
        if model is not None:
            offer(model)

    return handle
