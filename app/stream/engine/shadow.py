"""The shadow model: a candidate scored on every batch beside the active model, never acted on.

`fraudstream model shadow --model V` publishes V under its own key of the control topic
(app.control);
every worker loads and validates it like an activation (in a thread; refused and logged if it
does not validate) and swaps it in between batches. While one is set, each scored batch costs
one more model call (the same float32 matrix), and every row goes to `features.shadow` with
both scores and both policies' decisions. `model shadow --stop` publishes an empty version.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import numpy as np

from app.kafka import topics
from app.kafka.records import OutRecord
from app.kafka.shadowrow import ShadowRow
from app.scoring.policy import Thresholds, decide
from app.scoring.registry import LoadedModel
from app.stream import metrics
from app.stream.engine.pipeline import Scored

log = logging.getLogger(__name__)

_NONE: Final = object()


class ShadowStage:
    """Holds the shadow model, if any; a change is applied only between batches."""

    def __init__(self) -> None:
        self.model: LoadedModel | None = None
        self._pending: object = _NONE

    def offer(self, model: LoadedModel | None) -> None:
        """Queue a validated shadow model (None: stop shadowing) for the next batch."""
        self._pending = model

    def run(self, scored: Sequence[Scored], matrix: np.ndarray, scores: np.ndarray, *,
            active_version: str, active: Thresholds) -> list[OutRecord]:
        """The shadow rows of a scored batch (nothing while no shadow model is set)."""
        if self._pending is not _NONE:
            self.model, self._pending = self._pending, _NONE  # type: ignore[assignment]
            metrics.SHADOW_MODEL.clear()
            if self.model is not None:
                metrics.SHADOW_MODEL.labels(self.model.version).set(1)
            log.info("shadow model: %s", self.model.version if self.model else "none")
        shadow = self.model
        if shadow is None or not scored:
            return []
        shadow_scores = shadow.scorer.score(matrix).tolist()
        thresholds = shadow.thresholds
        out = []
        differ = 0
        for item, a, b in zip(scored, scores.tolist(), shadow_scores, strict=True):
            mine, theirs = decide(a, active), decide(b, thresholds)
            differ += mine != theirs
            src, txn = item.source, item.txn
            row = ShadowRow(txn.txn_id, txn.card_id, txn.ts_ms, src.partition, src.offset,
                            item.redelivered, active_version, a, list(mine), shadow.version, b,
                            list(theirs))
            out.append(OutRecord(topics.FEATURES_SHADOW, txn.card_id.encode(), row.to_json(),
                                 source_partition=src.partition))
        metrics.SHADOW_SCORED.inc(len(out))
        metrics.SHADOW_DISAGREED.inc(differ)
        return out


def shadow_handler(load: Callable[[str], LoadedModel], offer: Callable[[LoadedModel | None], None]
                   ) -> Callable[[str | None], Awaitable[None]]:
    """Validate a published shadow version in a thread, then offer it; one that fails is
    refused and logged (the previous shadow, if any, keeps running)."""
    from app.stream.feeds.control import validated_model

    async def handle(version: str | None) -> None:
        if version is None:
            metrics.SHADOW_MODELS.labels("stopped").inc()
            offer(None)
            return
        model = await validated_model(load, version, metrics.SHADOW_MODELS,
                                      "shadow model %s refused: %s")
        if model is not None:
            offer(model)

    return handle
