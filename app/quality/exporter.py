"""Prometheus metrics of live quality, from the latest QualityBook snapshot, and the small web
app of `fraudstream quality` that serves them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.quality.book import Quality, QualityBook
from app.quality.feed import QualityFeed
from app.settings import Settings

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4"
#: Seconds between attempts to read the topics again after Kafka failed the feed.
RETRY_S = 5.0


class QualityCollector(Collector):
    """Exposes the snapshot `update` last stored (a day that is forgotten disappears)."""

    def __init__(self, feed: QualityFeed | None = None) -> None:
        self.feed = feed
        self.snapshot = Quality({}, 0, 0)

    def update(self, book: QualityBook) -> None:
        self.snapshot = book.quality()

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["day", "maturity"]
        precision = GaugeMetricFamily(
            "fraudstream_quality_precision",
            "Precision of freezes: frozen transactions labelled fraud / frozen transactions, by "
            "event day (day=all: every day kept) and label maturity (labels reported within "
            "1d/7d/30d of the transaction, or all so far).", labels=labels)
        recall = GaugeMetricFamily(
            "fraudstream_quality_recall",
            "Recall of fraud: fraud transactions frozen / fraud transactions, by event day and "
            "label maturity.", labels=labels)
        freezes = GaugeMetricFamily("fraudstream_quality_freezes",
                                    "Transactions frozen, by event day.", labels=labels)
        fraud = GaugeMetricFamily("fraudstream_quality_fraud",
                                  "Transactions labelled fraud, by event day and maturity.",
                                  labels=labels)
        caught = GaugeMetricFamily("fraudstream_quality_fraud_frozen",
                                   "Fraud transactions frozen, by event day and maturity.",
                                   labels=labels)
        for (day, maturity), counts in sorted(self.snapshot.counts.items()):
            key = [day, maturity]
            freezes.add_metric(key, counts.freezes)
            fraud.add_metric(key, counts.fraud)
            caught.add_metric(key, counts.fraud_frozen)
            if counts.precision is not None:
                precision.add_metric(key, counts.precision)
            if counts.recall is not None:
                recall.add_metric(key, counts.recall)
        yield from (precision, recall, freezes, fraud, caught)
        if self.feed is not None:
            read = CounterMetricFamily("fraudstream_quality_records",
                                       "Records the quality feed read, by topic.",
                                       labels=["topic"])
            refused = CounterMetricFamily("fraudstream_quality_refused_records",
                                          "Records it could not read (skipped), by topic.",
                                          labels=["topic"])
            for topic, n in self.feed.read.items():
                read.add_metric([topic], n)
                refused.add_metric([topic], self.feed.refused[topic])
            yield read
            yield refused
        labelled = GaugeMetricFamily("fraudstream_quality_labels",
                                     "Distinct labels read (by label_id).")
        labelled.add_metric([], self.snapshot.labels)
        yield labelled


def create_app(settings: Settings) -> web.Application:
    """The quality process: the feed as a task of the app, /metrics and /healthz."""
    book = QualityBook(keep_days=settings.quality_days)
    feed = QualityFeed(settings, book)
    collector = QualityCollector(feed)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    app = web.Application()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def follow() -> None:
        # folding a record twice changes nothing (a transaction, a freeze and a label_id count
        # once), so after a failure the feed simply reads everything again
        while True:
            try:
                await feed.run(lambda: collector.update(book),
                               interval_s=settings.quality_interval_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Kafka away: said in the log, retried
                log.warning("quality feed interrupted (%r); reading again in %.0f s", exc,
                            RETRY_S)
                await asyncio.sleep(RETRY_S)

    async def run_feed(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(follow(), name="quality-feed")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.cleanup_ctx.append(run_feed)
    return app

