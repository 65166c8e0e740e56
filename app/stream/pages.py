"""The worker's web pages: /metrics for Prometheus, /debug/tasks and /debug/consumer for stalls."""

from __future__ import annotations

import asyncio
import gc
import types
from collections.abc import Iterator
from typing import Any

import faust
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from app.drift.metrics import DRIFT_COLLECTOR
from app.stream.engine.engine import ScoreEngine
from app.stream.engine.pipeline import TransactionPipeline
from app.stream.engine.txnsink import TransactionalSink
from app.stream.kafka.sequencer import PartitionSequencer
from app.stream.state.cardstore import FencedTable
from app.stream.state.recovery import standby_lag


def add_pages(app: faust.App) -> None:
    """The pages every worker serves: /metrics and /debug/tasks."""
    _add_metrics_page(app)
    _add_tasks_page(app)


def add_consumer_page(app: faust.App, card_state: FencedTable, pipeline: TransactionPipeline,
                      sequencer: PartitionSequencer, engine: ScoreEngine,
                      txns: TransactionalSink | None) -> None:
    """/debug/consumer: the consumer's flow and partitions, the card cache and store, the
    checkpoint and the transactions (a worker with the score agent serves it)."""

    @app.page("/debug/consumer")
    async def consumer_page(web: Any, request: Any) -> Any:
        """`?light=1` leaves out `cached_events`, a pass over every cached card (20-35 ms at
        47k cards, the loop held meanwhile): for a probe that comes every second."""
        recovery = app.tables.recovery
        light = request.query.get("light") in ("1", "true")
        return web.json({**app.consumer.state(), "sequencer": sequencer.state(),
                         "cards": {"cached": pipeline.cached_cards,
                                   "cached_events": None if light else pipeline.cached_events,
                                   "store_memory": card_state.store_memory(),
                                   "restored": card_state.restorer.restored,
                                   "restored_by_partition": {
                                       str(p): n for p, n in
                                       card_state.restorer.restored_by_partition.items()},
                                   "standby_lag": standby_lag(recovery),
                                   "standbys": sorted(f"{tp.topic}:{tp.partition}"
                                                      for tp in recovery.standby_tps)},
                         "lists": {"control_offset": engine.stage.lists_offset,
                                   "decided_from": {str(p): o for p, o in
                                                    engine.stage.lists_from.items()}},
                         "checkpoint": {"in_flight": engine.checkpoint.in_flight,
                                        "held": engine.checkpoint.held,
                                        "completed": engine.checkpoint.completed},
                         "transactions": None if txns is None else {
                             "owned": sorted(txns.owned), "commits": txns.commits}})


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


def metrics_page() -> bytes:
    """The worker's /metrics: the default registry's families, then the drift families
    (written by their collector, app.drift.metrics)."""
    return generate_latest() + DRIFT_COLLECTOR.exposition()


class WorkerFamilies:
    """The families of `metrics_page` as a registry (a `collect` method), for a listener of
    prometheus_client's own (`fraudstream worker --metrics-listen`)."""

    def collect(self) -> Iterator[Any]:
        yield from REGISTRY.collect()
        yield from DRIFT_COLLECTOR.collect()


def _add_metrics_page(app: faust.App) -> None:
    @app.page("/metrics")
    async def prometheus_metrics(web: Any, request: Any) -> Any:
        # aiohttp wants the charset outside content_type
        return web.bytes(metrics_page(), content_type=CONTENT_TYPE_LATEST.split(";")[0])
