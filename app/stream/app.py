"""The Faust app factory: topics, the card_state table and the score agent, wired from Settings."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import types
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import faust
from faust.types import EventT
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.scoring.registry import LoadedModel
from app.settings import Settings
from app.stream import metrics, topics
from app.stream.cardstore import TableCardStore, card_table
from app.stream.control import activation_handler, follow_activations
from app.stream.dispatch import add_dispatch_agent
from app.stream.offsets import CommitWatchdog, consumer_state, install_strict_commits
from app.stream.pipeline import TransactionPipeline
from app.stream.records import OutRecord, SourceMessage
from app.stream.scoring import ScoringStage
from app.stream.sequencer import PartitionSequencer

log = logging.getLogger(__name__)

AgentName = Literal["score", "dispatch"]


@dataclass
class FraudApp:
    """The Faust app and the topics/table it owns."""

    app: faust.App
    settings: Settings
    out_topics: dict[str, faust.TopicT]
    card_state: faust.Table

    async def send(self, records: Sequence[OutRecord]) -> None:
        """Hand records to the producer; Faust flushes it before committing source offsets."""
        for rec in records:
            await self.out_topics[rec.topic].send(
                key=rec.key, value=rec.value, headers=list(rec.headers) or None
            )


def _raw_topic(app: faust.App, name: str, settings: Settings) -> faust.TopicT:
    return app.topic(
        name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
        partitions=settings.topic_partitions, replicas=settings.topic_replication,
    )


def create_app(
    settings: Settings,
    *,
    web_port: int | None = None,
    clock_ms: Callable[[], int] | None = None,
    model: LoadedModel | None = None,
    load_model: Callable[[str], LoadedModel] | None = None,
    control_offset: int = 0,
    agents: frozenset[AgentName] = frozenset({"score", "dispatch"}),
) -> FraudApp:
    """Build the Faust app with the chosen agents. Nothing connects until a worker starts it."""
    port = web_port or settings.web_port
    datadir = settings.state_dir.resolve() / f"worker-{port}"
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.effective_kafka_bootstrap}",
        store="rocksdb://" if settings.store == "rocksdb" else "memory://",
        datadir=str(datadir),
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.topic_replication,
        key_serializer="raw",
        value_serializer="raw",
        web_enabled=True,
        web_bind="127.0.0.1",
        web_port=port,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 3),
        autodiscover=False,
        topic_allow_declare=True,
    )
    out_topics = {name: _raw_topic(app, settings.topic(name), settings)
                  for name in topics.PIPELINE_TOPICS if name != topics.TRANSACTIONS}
    source = _raw_topic(app, settings.topic(topics.TRANSACTIONS), settings)
    card_state = card_table(app, settings.topic_partitions)
    fraud = FraudApp(app, settings, out_topics, card_state)
    install_strict_commits()
    watchdog = CommitWatchdog([settings.topic(topics.TRANSACTIONS), settings.topic(topics.ACTIONS)],
                              stall_s=settings.commit_stall_s)

    @app.timer(interval=max(0.5, settings.commit_stall_s / 4))
    async def repair_stuck_commits() -> None:  # pragma: no cover - end to end
        await watchdog.check(app.consumer)

    clock = clock_ms or (lambda: time.time_ns() // 1_000_000)

    if "dispatch" in agents:
        add_dispatch_agent(app, settings, fraud.send)
    _add_metrics_page(app)
    _add_tasks_page(app)
    _add_loop_monitor(app)
    if "score" not in agents:
        return fraud
    if model is None or load_model is None:
        raise ValueError("the score agent needs a model and a model loader")
    stage = ScoringStage(model, settings, clock)

    @app.task
    async def follow_models() -> None:  # pragma: no cover - end to end
        await follow_activations(settings, control_offset, activation_handler(load_model, stage.offer))

    store = TableCardStore(card_state, {})
    pipeline = TransactionPipeline(store, clock_ms=clock,
                                   allowed_lateness_ms=settings.allowed_lateness_ms,
                                   max_message_bytes=settings.max_message_bytes)

    async def handle(stream: faust.StreamT, events: list[EventT]) -> None:
        """One batch, start to finish: state, outputs, and a producer flush."""
        metrics.BATCH_SIZE.observe(len(events))
        store.events = {(e.message.partition, e.message.offset): e for e in events}
        batch = [SourceMessage(e.message.topic, e.message.partition, e.message.offset,
                               e.message.key, e.message.value) for e in events]
        outcome = pipeline.process(batch)
        await fraud.send(outcome.records)
        await fraud.send(stage.run(outcome.scored))
        # Outputs first, then state: a card record's source position (the re-read fence)
        # must never be durable before the served rows and actions of the messages it covers.
        await app.producer.flush()
        pipeline.persist(outcome)
        # Flushed before the acks: no changelog record of this batch can reach Kafka later,
        # after another worker has already restored this card from the changelog.
        await app.producer.flush()
        metrics.SCORED.inc(len(outcome.scored))

    sequencer = PartitionSequencer(app)

    @app.page("/debug/consumer")
    async def consumer_page(web: Any, request: Any) -> Any:
        return web.json({**consumer_state(app.consumer), "sequencer": sequencer.state()})

    @app.timer(interval=1.0)
    async def reseek_held_partitions() -> None:  # pragma: no cover - end to end
        await sequencer.check()

    @app.agent(source, name="score")
    async def score(stream: faust.StreamT) -> None:  # pragma: no cover - exercised end to end
        # Only explicit acks, after the work: Faust's take()/take_events() ack a batch in a
        # `finally`, and when a take generator closes it turns automatic acks back on for
        # events still queued, so a stopping worker would commit offsets of unprocessed
        # events. With acks off on the stream itself, nothing is acked but by us.
        stream.enable_acks = False  # what noack_take restores when it closes
        async for taken in stream.noack_take(settings.max_batch, within=settings.max_wait_s):
            events = await sequencer.admit(taken)
            if not events:
                continue
            await finish_even_if_cancelled(handle(stream, events))
            # not reached when the worker is stopping: those events stay unacknowledged and
            # are read again (as redeliveries) by whoever owns their partition next
            for event in events:
                await stream.ack(event)

    return fraud


async def finish_even_if_cancelled(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to completion even when the caller is cancelled (worker shutdown), then
    re-raise the cancellation: a half-done batch would leave changelog records to be flushed
    after this worker left the group, over the state of the worker that took its cards over."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


def _add_loop_monitor(app: faust.App, period_s: float = 0.1) -> None:
    """Measure how long the event loop is held (inference, serialisation) by a late timer."""

    @app.task
    async def watch_loop() -> None:  # pragma: no cover - end to end
        loop = asyncio.get_running_loop()
        worst = 0.0
        while True:
            t0 = loop.time()
            await asyncio.sleep(period_s)
            lag = max(0.0, loop.time() - t0 - period_s)
            metrics.LOOP_LAG.observe(lag)
            if lag > worst:
                worst = lag
                metrics.LOOP_LAG_MAX.set(worst)


def _await_chain(obj: Any) -> list[str]:
    chain = []
    while obj is not None and len(chain) < 40:
        frame = (getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)
                 or getattr(obj, "gi_frame", None))
        if frame is None:
            chain.append(type(obj).__name__)
            break
        chain.append(f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} "
                     f"{frame.f_code.co_name}")
        obj = (getattr(obj, "cr_await", None) or getattr(obj, "ag_await", None)
               or getattr(obj, "gi_yieldfrom", None))
    return chain


def _add_tasks_page(app: faust.App) -> None:
    @app.page("/debug/tasks")
    async def tasks_page(web: Any, request: Any) -> Any:
        tasks = [_await_chain(t.get_coro()) for t in asyncio.all_tasks()]
        agens = [_await_chain(g) for g in gc.get_objects()
                 if isinstance(g, types.AsyncGeneratorType) and g.ag_frame is not None]
        return web.json({"tasks": tasks, "async_generators": agens})


def _add_metrics_page(app: faust.App) -> None:
    @app.page("/metrics")
    async def prometheus_metrics(web: Any, request: Any) -> Any:
        # aiohttp wants the charset outside content_type
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])
