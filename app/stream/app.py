"""The Faust app factory: topics, the card_state table and the score agent, wired from Settings."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import faust
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.actions.delivery import ActionDeliverer
from app.kafka import topics
from app.kafka.records import OutRecord
from app.kafka.sink import BatchSink
from app.scoring.registry import LoadedModel
from app.security.kafka import faust_broker_credentials, kafka_client_kwargs
from app.settings import Settings
from app.stream import metrics
from app.stream.carddb import CardDBOptions
from app.stream.cardstore import TableCards, card_table
from app.stream.checkpoint import Checkpoint
from app.stream.consumer import MAX_POLL_RECORDS, broker_url, check_faust_version
from app.stream.control import activation_handler
from app.stream.controlfeed import ControlHandlers, follow_control, wait_ready
from app.stream.dispatch import Dispatcher
from app.stream.engine import ScoreEngine
from app.stream.labelfeed import LabelView, follow_labels
from app.stream.labelfeed import wait_ready as wait_labels_ready
from app.stream.pipeline import TransactionPipeline
from app.stream.recovery import TransactionalTableManager
from app.stream.restore import CardTableManager, ChangelogRestorer, standby_lag
from app.stream.scoring import ScoringStage
from app.stream.sequencer import PartitionSequencer
from app.stream.shadow import shadow_handler
from app.stream.txnsink import TransactionalSink
from app.stream.watchdog import CommitWatchdog

log = logging.getLogger(__name__)

#: How often a member heartbeats, the most it takes to learn of a rebalance (see create_app).
HEARTBEAT_INTERVAL_S = 0.25

AgentName = Literal["score", "dispatch"]

#: The card changelog is compacted (a cold restore reads about one record per card); its
#: segments roll at 64 MiB or 10 minutes so that all but the newest can be compacted (the
#: active segment never is), and the cleaner runs once 10 % of the log is superseded.
CARD_CHANGELOG_CONFIGS = {
    "segment.bytes": str(64 << 20),
    "segment.ms": str(10 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.1",
}


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
        partitions=settings.topic_partitions, replicas=settings.replication,
    )


def worker_datadir(settings: Settings, port: int | None) -> Path:
    """A worker's data directory (its card store, its recorded group member): one per web port,
    so a worker restarted on its port finds them."""
    return settings.state_dir.resolve() / f"worker-{port or settings.web_port}"


def create_app(
    settings: Settings,
    *,
    web_port: int | None = None,
    clock_ms: Callable[[], int] | None = None,
    model: LoadedModel | None = None,
    load_model: Callable[[str], LoadedModel] | None = None,
    control_offset: int = 0,
    shadow: tuple[LoadedModel | None, int] = (None, 0),
    agents: frozenset[AgentName] = frozenset({"score", "dispatch"}),
) -> FraudApp:
    """Build the Faust app with the chosen agents. Nothing connects until a worker starts it."""
    check_faust_version()
    port = web_port or settings.web_port
    datadir = worker_datadir(settings, port)
    datadir.parent.mkdir(parents=True, exist_ok=True)  # Faust creates only the last level
    app = faust.App(
        settings.app_id,
        broker=broker_url(settings.effective_kafka_bootstrap),
        broker_credentials=faust_broker_credentials(settings),
        store="memory://",  # the card table chooses its own (card_table)
        datadir=str(datadir),
        # the card changelog is read ahead of Faust's recovery; in exactly_once a changelog
        # partition also counts as read once only commit markers are left (app.stream.recovery)
        TableManager=(TransactionalTableManager if settings.processing == "exactly_once"
                      else CardTableManager),
        table_standby_replicas=settings.standby_replicas,
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.replication,
        key_serializer="raw",
        value_serializer="raw",
        web_enabled=True,
        web_bind="127.0.0.1",
        web_port=port,
        producer_acks=-1,
        # the engine sends a batch's records for one partition as one record batch
        producer_max_batch_size=1 << 18,
        producer_linger=settings.producer_linger_ms / 1000,
        consumer_auto_offset_reset="earliest",
        # a fetch call's records are one chunk: bounded, so a backlog stays in Kafka
        broker_max_poll_records=MAX_POLL_RECORDS,
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        broker_session_timeout=settings.session_timeout_s,
        # members learn of a rebalance (a member that left, say) only from a heartbeat's answer:
        # every 250 ms rather than every 3 s cuts up to 2.75 s off each hand-over of a rolling
        # restart, for four small requests a second
        broker_heartbeat_interval=min(HEARTBEAT_INTERVAL_S, settings.session_timeout_s / 3),
        autodiscover=False,
        topic_allow_declare=True,
    )
    app.fraudstream_processing = settings.processing  # read by FraudConsumer
    out_topics = {name: _raw_topic(app, settings.topic(name), settings)
                  for name in topics.PIPELINE_TOPICS if name != topics.TRANSACTIONS}
    source = _raw_topic(app, settings.topic(topics.TRANSACTIONS), settings)
    card_state = card_table(
        app, settings.topic_partitions, store=f"{settings.store}://",
        db_options=CardDBOptions(block_cache_bytes=settings.store_cache_mb << 20),
        restorer=ChangelogRestorer(
            lambda: kafka_client_kwargs(settings), isolation_level=settings.isolation_level,
            # the raw reader would apply aborted transactions' records: committed ones only
            raw_fetch=settings.processing != "exactly_once"),
        changelog_configs=CARD_CHANGELOG_CONFIGS)
    fraud = FraudApp(app, settings, out_topics, card_state)
    watchdog = CommitWatchdog([settings.topic(topics.TRANSACTIONS), settings.topic(topics.ACTIONS)],
                              stall_s=settings.commit_stall_s)

    @app.timer(interval=max(0.5, settings.commit_stall_s / 4))
    async def repair_stuck_commits() -> None:  # pragma: no cover - end to end
        await watchdog.check(app.consumer)

    clock = clock_ms or (lambda: time.time_ns() // 1_000_000)

    chunk_topics: set[str] = set()
    if "dispatch" in agents:
        actions_topic = settings.topic(topics.ACTIONS)
        app.topics.add(_raw_topic(app, actions_topic, settings))  # chunks go to the dispatcher
        chunk_topics.add(actions_topic)
        dispatcher = Dispatcher(app, actions_topic, fraud.send,
                                lambda: ActionDeliverer(settings),
                                max_batch=settings.dispatch_concurrency * 4)
        watchdog.idle = lambda topic: topic == actions_topic and dispatcher.idle()

        @app.task
        async def dispatch() -> None:  # pragma: no cover - end to end
            app.consumer.settlers.append(dispatcher.settle)  # a revoke commits what it finished
            await dispatcher.run()

        @app.timer(interval=1.0)
        async def reseek_held_actions() -> None:  # pragma: no cover - end to end
            await dispatcher.sequencer.check()

    app.fraudstream_chunk_topics = frozenset(chunk_topics)  # read by FraudConsumer
    _add_metrics_page(app)
    _add_tasks_page(app)
    _add_loop_monitor(app)
    if "score" not in agents:
        return fraud
    if model is None or load_model is None:
        raise ValueError("the score agent needs a model and a model loader")
    stage = ScoringStage(model, settings, clock)
    shadow_model, _ = shadow  # the shadow set at start (changes follow from control_offset)
    if shadow_model is not None:
        stage.shadow.offer(shadow_model)

    control_read = asyncio.Event()

    @app.task
    async def follow_control_topic() -> None:  # pragma: no cover - end to end
        await follow_control(settings, control_offset, ControlHandlers(
            lists=stage.install_lists, rules=stage.install_rules,
            activation=activation_handler(load_model, stage.offer),
            shadow=shadow_handler(load_model, stage.shadow.offer)), control_read)

    labels = LabelView()

    @app.task
    async def follow_label_feed() -> None:  # pragma: no cover - end to end
        await follow_labels(settings, labels)

    source_name = settings.topic(topics.TRANSACTIONS)
    app.topics.add(source)  # subscribed; its chunks go to the engine, not through an agent
    app.fraudstream_chunk_topics = frozenset({*chunk_topics, source_name})
    sink = BatchSink(lambda: app.producer._ensure_producer(),
                     {name: settings.topic(name) for name in topics.PIPELINE_TOPICS})
    txns: TransactionalSink | None = None
    if settings.processing == "exactly_once":
        txns = _transactional_sink(settings, source_name)
        app.fraudstream_transactional_topics = frozenset({source_name})  # read by FraudConsumer
        app.fraudstream_assign_hooks = [  # read by FraudConsumer: fence before reading
            lambda assigned, generation: txns.assign(  # type: ignore[union-attr]
                {tp.partition for tp in assigned if tp.topic == source_name}, generation)]
    cards = TableCards(card_state, txns or sink)
    pipeline = TransactionPipeline(cards, clock_ms=clock,
                                   allowed_lateness_ms=settings.allowed_lateness_ms,
                                   max_message_bytes=settings.max_message_bytes,
                                   max_cached_cards=settings.card_cache, merchants=labels)
    sequencer = PartitionSequencer(app)
    engine = ScoreEngine(
        app, pipeline, stage, sequencer,
        lambda ack: Checkpoint((txns or sink).send, cards, ack,
                               max_in_flight=settings.max_in_flight, served=ScoreEngine.served,
                               transactions=txns),
        topic=source_name, max_batch=settings.max_batch, max_held=settings.max_held,
        state_interval_s=settings.state_interval_ms / 1000)

    @app.page("/debug/consumer")
    async def consumer_page(web: Any, request: Any) -> Any:
        """`?light=1` leaves out `cached_events`, a pass over every cached card (20-35 ms at
        47k cards, the loop held meanwhile): for a probe that comes every second."""
        recovery = app.tables.recovery
        light = request.query.get("light") in ("1", "true")
        return web.json({**app.consumer.state(), "sequencer": sequencer.state(),
                         "cards": {"cached": pipeline.cached_cards,
                                   "cached_events": None if light else pipeline.cached_events,
                                   "store_memory": card_state.store_memory(),  # type: ignore[attr-defined]
                                   "restored": card_state.restorer.restored,  # type: ignore[attr-defined]
                                   "standby_lag": standby_lag(recovery),
                                   "standbys": sorted(f"{tp.topic}:{tp.partition}"
                                                      for tp in recovery.standby_tps)},
                         "checkpoint": {"in_flight": engine.checkpoint.in_flight,
                                        "held": engine.checkpoint.held,
                                        "completed": engine.checkpoint.completed},
                         "transactions": None if txns is None else {
                             "owned": sorted(txns.owned), "commits": txns.commits}})

    @app.timer(interval=5.0)
    async def card_store_memory() -> None:  # pragma: no cover - end to end
        for kind, size in card_state.store_memory().items():  # type: ignore[attr-defined]
            metrics.CARD_STORE_MEMORY.labels(kind).set(size)

    @app.timer(interval=1.0)
    async def reseek_held_partitions() -> None:  # pragma: no cover - end to end
        await sequencer.check()

    @app.timer(interval=1.0)
    async def caught_up_lag() -> None:  # pragma: no cover - end to end
        consumer = app.consumer
        for tp in consumer.assignment():
            if tp.topic != source_name:
                continue
            read = consumer._read_offset.get(tp)
            high = consumer.highwater(tp)
            if high is not None and (read is None and high == 0 or read is not None
                                     and read + 1 >= high):
                metrics.LAG_SECONDS.labels(tp.topic, str(tp.partition)).set(0.0)

    @app.task
    async def score() -> None:  # pragma: no cover - exercised end to end
        app.consumer.settlers.append(engine.settle)  # a revoke commits what the engine finished
        app.consumer.busy_probes.append(engine.busy)
        # before the first batch: whatever the first produce or inference would pay
        stage.warm(settings.max_batch)
        try:
            leaderless = await sink.warm([card_state.changelog_topic.get_topic_name()])
            if leaderless:
                log.warning("partitions still without a leader: %s", ", ".join(leaderless))
        except Exception as exc:  # noqa: BLE001 - only a first-batch delay: learnt on first use
            log.warning("output topics' metadata not fetched ahead (%r)", exc)
        await wait_ready(control_read)  # no transaction is decided without the lists and rules
        await wait_labels_ready(labels)  # nor scored before the label feed's first round
        try:
            await engine.run()
        finally:
            if txns is not None:  # after the drain: what is still open is aborted
                await asyncio.shield(txns.close())

    return fraud


def _transactional_sink(settings: Settings, source_topic: str) -> TransactionalSink:
    """exactly_once: the transactional producers, one per owned input partition."""
    from aiokafka import AIOKafkaProducer

    def make_producer(transactional_id: str) -> AIOKafkaProducer:
        return AIOKafkaProducer(**kafka_client_kwargs(settings),
                                client_id=transactional_id,
                                transactional_id=transactional_id, enable_idempotence=True,
                                acks="all", max_batch_size=1 << 18,
                                linger_ms=settings.producer_linger_ms)

    return TransactionalSink(make_producer,
                             {name: settings.topic(name) for name in topics.PIPELINE_TOPICS},
                             app_id=settings.app_id, source_topic=source_topic,
                             group_id=settings.app_id)


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
