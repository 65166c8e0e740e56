"""The label feed in every worker: all of the `labels` topic folded into the merchant book.

Merchant features (app.features.merchant) are a pure function of the merchant, the scored
transaction's day and the labels reported before a *cut*. Every worker reads every partition of
`labels` itself (labels are few beside transactions, and merchants span all card partitions),
so the features do not depend on which card partitions it owns. The follower works in rounds:
note the wall time t, ask the broker for every partition's end offset, read up to those ends;
then every label produced before t has been folded, and the cut becomes t. A transaction is
scored with the cut of its batch, which its served row records (`label_cut_ms`), so the audit
recomputes it exactly. Exactness assumes the reporter produces a label before its reported_at
passes (a label's time is when it was known); labels imported later are counted from then on
(`fraudstream_labels_read_total{kind="behind_cut"}`), and rows scored before stay as served.
The worker scores nothing until the first round is complete.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from prometheus_client import Counter, Gauge

from app.features.merchant import ONLINE_HORIZON_HOURS, MerchantBook
from app.kafka import topics
from app.kafka.inspect import start_or_close
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.transactions.labels import LabelRecord

log = logging.getLogger(__name__)

#: Seconds between rounds once caught up (the cut trails the wall clock by about this much).
ROUND_S: Final = 1.0
#: A worker still without its first round this long after starting says so in its log.
READY_WARN_S: Final = 30.0

LABELS_READ: Final = Counter(
    "fraudstream_labels_read_total",
    "Labels read by the merchant feed, by kind (folded, unusable: no merchant or event time, "
    "repeated label_id or too old; behind_cut: reported before the cut it arrived after; "
    "invalid: not a label record).", ["kind"])
LABEL_CUT: Final = Gauge("fraudstream_label_cut_seconds",
                         "The merchant features' label cut: labels reported before it are read.")


class LabelView:
    """The merchant book and its cut, as the score pipeline reads them (one cut per batch)."""

    def __init__(self, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.book = MerchantBook(horizon_hours=ONLINE_HORIZON_HOURS)
        #: the merchant features of a transaction (the book's own method: one call per event)
        self.vector = self.book.vector
        #: labels reported before this have been read (0 until the first round is complete)
        self.cut_ms = 0
        self.ready = asyncio.Event()
        self._clock = clock_ms

    def fold(self, raw: bytes | None) -> None:
        """Fold one record of the labels topic."""
        if raw is None:
            return
        try:
            rec = LabelRecord.from_json(raw)
        except (ValueError, KeyError, TypeError):
            LABELS_READ.labels("invalid").inc()
            return
        if rec.reported_at_ms < self.cut_ms:
            LABELS_READ.labels("behind_cut").inc()
        LABELS_READ.labels("folded" if self.book.add(rec) else "unusable").inc()

    def advance(self, cut_ms: int) -> None:
        """A round is complete: everything produced before `cut_ms` is folded."""
        if cut_ms > self.cut_ms:
            self.cut_ms = cut_ms
            LABEL_CUT.set(cut_ms / 1000)
        if not self.ready.is_set():
            self.ready.set()
            log.info("label feed read: %d labels feed the merchant features",
                     self.book.labels)

    def now_ms(self) -> int:
        return self._clock()


async def follow_labels(settings: Settings, view: LabelView, *,
                        round_s: float = ROUND_S) -> None:
    """Fold every partition of `labels` from its start into `view`, advancing its cut after each
    round (runs forever)."""
    from aiokafka import AIOKafkaConsumer

    topic = settings.topic(topics.LABELS)
    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings), enable_auto_commit=False,
                                auto_offset_reset="earliest",
                                isolation_level=settings.isolation_level)
    await start_or_close(consumer)
    try:
        tps: list[Any] = []
        while True:
            started = view.now_ms()
            try:
                if not tps:
                    tps = await _assign(consumer, topic)
                    if not tps:  # no such topic (yet): nothing can have been produced to it
                        view.advance(started)
                        await asyncio.sleep(round_s)
                        continue
                ends = await consumer.end_offsets(tps)
                while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                    batch = await consumer.getmany(*tps, timeout_ms=200)
                    for records in batch.values():
                        for msg in records:
                            view.fold(msg.value)
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - a broker away: the cut waits, retried
                log.warning("label feed: round failed (%r); the cut stays at %d, retrying",
                            exc, view.cut_ms)
                await asyncio.sleep(round_s)
                continue
            view.advance(started)
            await asyncio.sleep(round_s)
    finally:
        await consumer.stop()


async def _assign(consumer: Any, topic: str) -> list[Any]:  # noqa: ANN401
    """Every partition of `topic`, assigned from its start (none: no such topic yet)."""
    from aiokafka import TopicPartition

    parts = await _partitions(consumer, topic)
    if not parts:
        return []
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    return tps


async def _partitions(consumer: Any, topic: str) -> set[int] | None:  # noqa: ANN401
    """The topic's partitions from fresh cluster metadata (None: no such topic yet)."""
    try:
        cluster = await consumer._client.fetch_all_metadata()  # noqa: SLF001
    except Exception as exc:  # noqa: BLE001 - asked again next round
        log.warning("label feed: no cluster metadata (%r)", exc)
        return None
    return cluster.partitions_for_topic(topic)


async def wait_ready(view: LabelView) -> None:
    """Wait for the label feed's first round, saying so in the log while it takes long."""
    while True:
        try:
            await asyncio.wait_for(view.ready.wait(), READY_WARN_S)
            return
        except TimeoutError:
            log.warning("still reading the labels topic for the merchant features; "
                        "not scoring until it is read")
