"""The shadow model: a candidate scored on every batch beside the active model, never acted on.

`fraudstream model shadow VERSION` publishes VERSION under its own key of the control topic;
every worker loads and validates it like an activation (in a thread; refused and logged if it
does not validate) and swaps it in between batches. While one is set, each scored batch costs
one more model call (the same float32 matrix), and every row goes to `features.shadow` with
both scores and both policies' decisions. `model shadow --stop` publishes an empty version.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import numpy as np
import orjson

from app.kafka import topics
from app.kafka.records import OutRecord
from app.kafka.shadowrow import ShadowRow
from app.scoring.policy import Thresholds, decide
from app.scoring.registry import LoadedModel
from app.settings import Settings
from app.stream import metrics
from app.stream.pipeline import Scored

log = logging.getLogger(__name__)

SHADOW_MODEL_KEY: Final = b"shadow_model"
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


async def publish_shadow(settings: Settings, version: str | None) -> None:
    """Record `version` as every worker's shadow model (None: none); compacted, latest wins."""
    from app.stream.control import publish_control

    value = orjson.dumps({"version": version, "at_ms": time.time_ns() // 1_000_000})
    await publish_control(settings, SHADOW_MODEL_KEY, value)


def shadow_version_of(value: bytes) -> tuple[bool, str | None]:
    """(is a shadow record, its version or None for "stop")."""
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False, None
    if not isinstance(obj, dict) or "version" not in obj:
        return False, None
    version = obj["version"]
    return (True, version) if version is None or isinstance(version, str) else (False, None)


async def latest_shadow(settings: Settings) -> tuple[str | None, int]:
    """(the shadow version currently set or None, the control topic's end offset)."""
    from app.kafka.inspect import read_topic

    records = await read_topic(settings, settings.topic(topics.CONTROL), timeout_s=30.0)
    version = None
    for rec in records:
        if rec.key == SHADOW_MODEL_KEY:
            ok, found = shadow_version_of(rec.value)
            if ok:
                version = found
    return version, (records[-1].offset + 1 if records else 0)


async def follow_shadow(settings: Settings, start_offset: int,
                        on_version: Callable[[str | None], Awaitable[None]], *,
                        poll_s: float = 0.5) -> None:
    """Call `on_version` for every shadow change published from `start_offset` on (forever).
    Its own reader of the control partition: a broadcast, like activations."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from app.security.kafka import kafka_client_kwargs

    tp = TopicPartition(settings.topic(topics.CONTROL), 0)
    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings), enable_auto_commit=False,
                                isolation_level=settings.isolation_level)
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, start_offset)
        while True:
            batch = await consumer.getmany(tp, timeout_ms=int(poll_s * 1000))
            for msg in batch.get(tp, []):
                if msg.key == SHADOW_MODEL_KEY:
                    ok, version = shadow_version_of(msg.value)
                    if ok:
                        await on_version(version)
    finally:
        await consumer.stop()


def shadow_handler(load: Callable[[str], LoadedModel], offer: Callable[[LoadedModel | None], None]
                   ) -> Callable[[str | None], Awaitable[None]]:
    """Validate a published shadow version in a thread, then offer it; one that fails is
    refused and logged (the previous shadow, if any, keeps running)."""
    from app.stream.control import validated_model

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
