"""The Faust app factory: topics, the card_state table and the score agent, wired from Settings."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import faust

from app.actions.delivery import ActionDeliverer
from app.kafka import topics
from app.kafka.records import OutRecord
from app.kafka.sink import BatchSink
from app.scoring.registry import LoadedModel
from app.security.kafka import faust_broker_credentials, kafka_client_kwargs
from app.settings import Settings
from app.stream import metrics
from app.stream.engine.checkpoint import Checkpoint
from app.stream.engine.dispatch import Dispatcher
from app.stream.engine.engine import ScoreEngine
from app.stream.engine.pipeline import TransactionPipeline
from app.stream.engine.scoring import ScoringStage
from app.stream.engine.shadow import shadow_handler
from app.stream.engine.txnsink import TransactionalSink
from app.stream.feeds.control import activation_handler
from app.stream.feeds.controlfeed import ControlHandlers, follow_control, wait_ready
from app.stream.feeds.labelfeed import LabelView, follow_labels
from app.stream.feeds.labelfeed import wait_ready as wait_labels_ready
from app.stream.kafka.consumer import broker_url, check_faust_version
from app.stream.kafka.fetching import MAX_POLL_RECORDS
from app.stream.kafka.plan import ConsumerPlan
from app.stream.kafka.sequencer import PartitionSequencer
from app.stream.kafka.watchdog import CommitWatchdog
from app.stream.pages import add_consumer_page, add_pages
from app.stream.state.carddb import CardDBOptions
from app.stream.state.cardstore import FencedTable, TableCards, card_table
from app.stream.state.recovery import CardTableManager, TransactionalTableManager
from app.stream.state.restore import ChangelogRestorer

log = logging.getLogger(__name__)

#: How often a member heartbeats, the most it takes to learn of a rebalance (see _faust_app).
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
    card_state: FencedTable

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
    app = _faust_app(settings, web_port or settings.web_port)
    txns = (_transactional_sink(settings, settings.topic(topics.TRANSACTIONS))
            if "score" in agents and settings.processing == "exactly_once" else None)
    app.consumer_plan = _consumer_plan(settings, agents, txns)  # type: ignore[attr-defined]
    fraud = FraudApp(app, settings, _out_topics(app, settings), _card_state(app, settings))
    watchdog = _add_commit_watchdog(app, settings)
    if "dispatch" in agents:
        _add_action_loop(fraud, watchdog)
    add_pages(app)
    _add_loop_monitor(app)
    if "score" not in agents:
        return fraud
    if model is None or load_model is None:
        raise ValueError("the score agent needs a model and a model loader")
    clock = clock_ms or _wall_clock_ms
    stage = ScoringStage(model, settings, clock)
    shadow_model, _ = shadow  # the shadow set at start (changes follow from control_offset)
    if shadow_model is not None:
        stage.shadow.offer(shadow_model)
    feeds = _add_feeds(app, settings, stage, load_model, control_offset)
    _add_engine(fraud, stage, feeds, txns, clock)
    return fraud


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _faust_app(settings: Settings, port: int) -> faust.App:
    """The Faust app on the `fraudstream://` transport, its data directory one per web port."""
    datadir = worker_datadir(settings, port)
    datadir.parent.mkdir(parents=True, exist_ok=True)  # Faust creates only the last level
    return faust.App(
        settings.app_id,
        broker=broker_url(settings.effective_kafka_bootstrap),
        broker_credentials=faust_broker_credentials(settings),
        store="memory://",  # the card table chooses its own (card_table)
        datadir=str(datadir),
        # the card changelog is read ahead of Faust's recovery; in exactly_once a changelog
        # partition also counts as read once only commit markers are left
        # (app.stream.state.recovery)
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


def _consumer_plan(settings: Settings, agents: frozenset[AgentName],
                   txns: TransactionalSink | None) -> ConsumerPlan:
    """What FraudConsumer reads for the chosen agents: the actions topic's chunks go to the
    dispatcher, the input topic's to the score engine; in exactly_once (`txns`) the input's
    offsets are the engine's transactions' to commit, and their producers fence the previous
    owners of an assignment before anything is read."""
    source_name = settings.topic(topics.TRANSACTIONS)
    chunk_topics: set[str] = set()
    if "dispatch" in agents:
        chunk_topics.add(settings.topic(topics.ACTIONS))
    if "score" in agents:
        chunk_topics.add(source_name)
    if txns is None:
        return ConsumerPlan(processing=settings.processing, chunk_topics=frozenset(chunk_topics))
    return ConsumerPlan(
        processing=settings.processing, chunk_topics=frozenset(chunk_topics),
        transactional_topics=frozenset({source_name}),
        assign_hooks=(lambda assigned, generation: txns.assign(
            {tp.partition for tp in assigned if tp.topic == source_name}, generation),))


def _out_topics(app: faust.App, settings: Settings) -> dict[str, faust.TopicT]:
    return {name: _raw_topic(app, settings.topic(name), settings)
            for name in topics.PIPELINE_TOPICS if name != topics.TRANSACTIONS}


def _card_state(app: faust.App, settings: Settings) -> FencedTable:
    """The card_state table in the configured store, its changelog read ahead of Faust's
    recovery."""
    return card_table(
        app, settings.topic_partitions, store=f"{settings.store}://",
        db_options=CardDBOptions(block_cache_bytes=settings.store_cache_mb << 20),
        restorer=ChangelogRestorer(
            lambda: kafka_client_kwargs(settings), isolation_level=settings.isolation_level,
            # the raw reader would apply aborted transactions' records: committed ones only
            raw_fetch=settings.processing != "exactly_once"),
        changelog_configs=CARD_CHANGELOG_CONFIGS)


def _add_commit_watchdog(app: faust.App, settings: Settings) -> CommitWatchdog:
    """The commit watchdog of the input and actions topics, and the timer that runs it."""
    watchdog = CommitWatchdog([settings.topic(topics.TRANSACTIONS), settings.topic(topics.ACTIONS)],
                              stall_s=settings.commit_stall_s)

    @app.timer(interval=max(0.5, settings.commit_stall_s / 4))
    async def repair_stuck_commits() -> None:  # pragma: no cover - end to end
        await watchdog.check(app.consumer)

    return watchdog


def _add_action_loop(fraud: FraudApp, watchdog: CommitWatchdog) -> None:
    """The dispatch agent: the actions topic's chunks go to the dispatcher."""
    app, settings = fraud.app, fraud.settings
    actions_topic = settings.topic(topics.ACTIONS)
    app.topics.add(_raw_topic(app, actions_topic, settings))  # chunks go to the dispatcher
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


class _Feeds(NamedTuple):
    """What the score agent waits for before its first batch."""

    control_read: asyncio.Event  # set once the control topic is read to its end
    labels: LabelView


def _add_feeds(app: faust.App, settings: Settings, stage: ScoringStage,
               load_model: Callable[[str], LoadedModel], control_offset: int) -> _Feeds:
    """The control topic's follower (lists, rules, models into the stage) and the label feed."""
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

    return _Feeds(control_read, labels)


def _add_engine(fraud: FraudApp, stage: ScoringStage, feeds: _Feeds,
                txns: TransactionalSink | None, clock: Callable[[], int]) -> None:
    """The score agent: the input topic's chunks go to the score engine, its durable points
    through the checkpoint (into Kafka transactions in exactly_once: `txns`)."""
    app, settings, card_state = fraud.app, fraud.settings, fraud.card_state
    source_name = settings.topic(topics.TRANSACTIONS)
    # subscribed; its chunks go to the engine, not through an agent
    app.topics.add(_raw_topic(app, source_name, settings))
    sink = BatchSink(lambda: app.producer._ensure_producer(),
                     {name: settings.topic(name) for name in topics.PIPELINE_TOPICS})
    cards = TableCards(card_state, txns or sink)
    pipeline = TransactionPipeline(cards, clock_ms=clock,
                                   allowed_lateness_ms=settings.allowed_lateness_ms,
                                   max_message_bytes=settings.max_message_bytes,
                                   max_cached_cards=settings.card_cache, merchants=feeds.labels)
    sequencer = PartitionSequencer(app)
    engine = ScoreEngine(
        app, pipeline, stage, sequencer,
        lambda ack: Checkpoint((txns or sink).send, cards, ack,
                               max_in_flight=settings.max_in_flight, served=ScoreEngine.served,
                               transactions=txns),
        topic=source_name, max_batch=settings.max_batch, max_held=settings.max_held,
        state_interval_s=settings.state_interval_ms / 1000)
    add_consumer_page(app, card_state, pipeline, sequencer, engine, txns)
    _add_engine_timers(app, card_state, sequencer, source_name)

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
        # no transaction is decided without the lists and rules, nor scored before the label
        # feed's first round
        await wait_ready(feeds.control_read)
        await wait_labels_ready(feeds.labels)
        try:
            await engine.run()
        finally:
            if txns is not None:  # after the drain: what is still open is aborted
                await asyncio.shield(txns.close())


def _add_engine_timers(app: faust.App, card_state: FencedTable, sequencer: PartitionSequencer,
                       source_name: str) -> None:
    """The card store's memory gauge, the input sequencer's re-seeks, and lag 0 once caught up."""

    @app.timer(interval=5.0)
    async def card_store_memory() -> None:  # pragma: no cover - end to end
        for kind, size in card_state.store_memory().items():
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
