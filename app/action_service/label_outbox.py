"""The label outbox's forwarder: analyst labels from Redis streams `labels:{tag}` to Kafka `labels`.

Why an outbox: a decision's label is written by the same Lua call as the decision itself
(decide.lua), so a label exists exactly when its decision does, whatever fails afterwards. A
producer call from the HTTP handler instead could lose the label (the process dies between the
Redis write and the Kafka ack) or send one for a decision that was never recorded. The outbox
makes Kafka optional for the answer (a decision is applied while Kafka is down) and the
forwarding at least once:

- one consumer group (`labels-forwarder`) per shard stream; each service process is a consumer
  (`<host>-<pid>`), so several replicas share the work;
- an entry is acknowledged (XACK, then XDEL: the outbox is not a ledger, `effects` is) only
  after Kafka acknowledged its record (acks=all, idempotent producer); a failed send leaves it
  pending and this consumer retries it on its next pass (it reads its own pending entries
  first);
- entries pending for over `claim_idle_ms` on a consumer that went away are claimed
  (XAUTOCLAIM) by a live one.

A crash between the Kafka ack and XACK sends a record twice: `label_id` (the decision's
ledger entry, `effects:{tag}/<entry id>`) is unique, so readers of `labels` keep the first record
of each label_id.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, Final

from redis.exceptions import RedisError, ResponseError

from app.action_service.redis_keys import LABEL_STREAMS
from app.settings import Settings
from app.transactions.labels import LabelRecord

logger = logging.getLogger(__name__)

GROUP: Final = "labels-forwarder"


def record_of(fields: dict[str, str]) -> LabelRecord:
    """The `labels` topic record of one outbox entry (written by decide.lua)."""
    return LabelRecord(
        label_id=fields["label_id"],
        txn_id=fields.get("txn_id") or None,
        card_id=fields.get("card_id") or None,
        label=int(fields["label"]),
        reported_at_ms=int(fields["reported_at_ms"]),
        source=fields["source"],
        by=fields.get("by") or None,
    )


class LabelForwarder:
    """Moves outbox entries to Kafka; `run` until cancelled. `send` produces one record and
    resolves when Kafka acknowledged it (an aiokafka producer's `send_and_wait`)."""

    def __init__(self, redis: Any, send: Callable[[LabelRecord], Any], *,  # noqa: ANN401
                 consumer: str | None = None, batch: int = 100, poll_s: float = 0.5,
                 claim_idle_ms: int = 30_000, streams: tuple[str, ...] = LABEL_STREAMS) -> None:
        self._redis = redis
        self._send = send
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self._batch = batch
        self._poll_s = poll_s
        self._claim_idle_ms = claim_idle_ms
        self._streams = streams
        self._groups_ready = False
        self.forwarded = 0

    async def _ensure_groups(self) -> None:
        if self._groups_ready:
            return
        for stream in self._streams:
            try:
                await self._redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._groups_ready = True

    async def claim_abandoned(self) -> int:
        """Take over entries pending on other consumers for over `claim_idle_ms`."""
        await self._ensure_groups()
        claimed = 0
        for stream in self._streams:
            reply = await self._redis.xautoclaim(stream, GROUP, self.consumer,
                                                 self._claim_idle_ms, "0-0", count=self._batch)
            claimed += len(reply[1])
        return claimed

    async def forward_once(self) -> int:
        """One pass over every shard: this consumer's pending entries first, else new ones;
        each sent to Kafka, then acknowledged and deleted. How many were forwarded."""
        await self._ensure_groups()
        done = 0
        for stream in self._streams:
            entries = await self._read(stream, "0") or await self._read(stream, ">")
            if not entries:
                continue
            await asyncio.gather(*(self._send(record_of(fields)) for _, fields in entries))
            ids = [entry_id for entry_id, _ in entries]
            await self._redis.xack(stream, GROUP, *ids)
            await self._redis.xdel(stream, *ids)
            done += len(ids)
        self.forwarded += done
        return done

    async def _read(self, stream: str, start: str) -> list[tuple[str, dict[str, str]]]:
        reply = await self._redis.xreadgroup(GROUP, self.consumer, {stream: start},
                                             count=self._batch)
        return [(entry_id, fields) for _, entries in reply or () for entry_id, fields in entries
                if fields]  # a pending entry deleted meanwhile comes back without fields

    async def run(self) -> None:
        """Forward until cancelled; errors (Redis or Kafka down) are logged and retried with
        a growing pause, entries stay in the outbox meanwhile."""
        passes = 0
        backoff = self._poll_s
        while True:
            try:
                if passes % 60 == 0:
                    await self.claim_abandoned()
                passes += 1
                moved = await self.forward_once()
                backoff = self._poll_s
                if moved:
                    logger.info("labels forwarded count=%d", moved)
                    continue
            except (TimeoutError, RedisError, OSError) as exc:
                logger.warning("label forwarding failed, retrying error=%s", type(exc).__name__)
                backoff = min(backoff * 2, 10.0)
            except Exception as exc:  # noqa: BLE001 - Kafka errors; the entries stay pending
                logger.warning("label forwarding failed, retrying error=%s", type(exc).__name__)
                backoff = min(backoff * 2, 10.0)
            await asyncio.sleep(backoff)


async def forward_to_kafka(settings: Settings, redis: Any) -> None:  # noqa: ANN401
    """Run a LabelForwarder with an idempotent aiokafka producer (acks=all) on the `labels`
    topic until cancelled; a broker that is not reachable yet is retried."""
    from aiokafka import AIOKafkaProducer

    from app.kafka import topics
    from app.kafka.inspect import start_or_close
    from app.security.kafka import kafka_client_kwargs

    topic = settings.topic(topics.LABELS)
    pause = 1.0
    while True:
        producer = AIOKafkaProducer(**kafka_client_kwargs(settings), acks="all",
                                    enable_idempotence=True, request_timeout_ms=30_000)
        try:
            await start_or_close(producer, timeout_s=30.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried; the labels wait in the outbox
            logger.warning("label forwarder: kafka not reachable, retrying error=%s",
                           type(exc).__name__)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)
            continue
        try:
            await LabelForwarder(redis, _sender(producer, topic)).run()
        finally:
            await producer.stop()


def _sender(producer: Any, topic: str) -> Callable[[LabelRecord], Any]:  # noqa: ANN401
    async def send(record: LabelRecord) -> object:
        return await producer.send_and_wait(topic, record.to_json(), key=record.key)

    return send
