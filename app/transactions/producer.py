"""Replaying a transaction log into Kafka: idempotent producer, keyed by card_id, rate-limited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.stream import topics
from app.stream.inspect import start_or_close
from app.transactions.logfile import card_key


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What a replay did."""

    sent: int
    errors: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds > 0 else 0.0


async def replay_messages(
    settings: Settings,
    messages: Iterable[bytes],
    *,
    rate: float | None = None,
    topic: str | None = None,
    on_progress: Callable[[int], None] | None = None,
    window: int = 5000,
) -> ReplayReport:
    """Produce `messages` in order to the transactions topic (acks=all, idempotent producer).

    Per-card order is kept: one producer, keyed by card_id, idempotence on. `rate` is messages
    per second (None: as fast as the broker takes them). At most `window` sends are in flight.
    """
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        **kafka_client_kwargs(settings),
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        max_batch_size=256 * 1024,
        request_timeout_ms=60_000,
    )
    name = topic or settings.topic(topics.TRANSACTIONS)
    await start_or_close(producer)
    sent = errors = 0
    pending: list[asyncio.Future[object]] = []
    t0 = time.monotonic()

    async def drain() -> None:
        nonlocal sent, errors
        for fut in pending:
            try:
                await fut
                sent += 1
            except Exception:  # noqa: BLE001 - counted and reported in the summary
                errors += 1
        pending.clear()
        if on_progress is not None:
            on_progress(sent + errors)

    try:
        for i, msg in enumerate(messages):
            if rate:
                ahead = i / rate - (time.monotonic() - t0)
                if ahead > 0:
                    await asyncio.sleep(ahead)  # pacing to the requested rate
            pending.append(await producer.send(name, value=msg, key=card_key(msg)))
            if len(pending) >= window:
                await drain()
        await drain()
    finally:
        await producer.stop()
    return ReplayReport(sent, errors, time.monotonic() - t0)
