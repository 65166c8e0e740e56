"""Replaying a transaction log into Kafka: idempotent producer, keyed by card_id, rate-limited."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.kafka import topics
from app.kafka.inspect import start_or_close
from app.kafka.sink import Entry, partition_for, send_grouped
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
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


#: A paced replay sends what has fallen due once per step: one produce request per step, as a
#: producer's linger would give, instead of a timer and a send per message.
PACE_STEP_S = 0.005
#: An unpaced replay (`rate` None) hands the producer this many messages at a time.
CHUNK = 2000


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

    Per-card order is kept: one producer, keyed by card_id, idempotence on, a record batch per
    partition handed over in message order (a message without a readable card_id goes to the
    partition its bytes hash to, so a re-sent copy lands where the first did). `rate` is
    messages per second (None: as fast as the broker takes them), met in PACE_STEP_S steps.
    At most `window` messages are in flight.
    """
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        **kafka_client_kwargs(settings),
        acks="all",
        enable_idempotence=True,
        linger_ms=0,  # the batches are made here, a step or a chunk at a time
        max_batch_size=256 * 1024,
        request_timeout_ms=60_000,
    )
    name = topic or settings.topic(topics.TRANSACTIONS)
    await start_or_close(producer)
    sent = errors = 0
    pending: list[tuple[asyncio.Future[object], int]] = []
    in_flight = taken = 0
    source = iter(messages)
    t0 = time.monotonic()

    async def drain() -> None:
        nonlocal sent, errors, in_flight
        for fut, count in pending:
            try:
                await fut
                sent += count
            except Exception:  # noqa: BLE001 - counted and reported in the summary
                errors += count
        pending.clear()
        in_flight = 0
        if on_progress is not None:
            on_progress(sent + errors)

    try:
        partitions = len(await producer.partitions_for(name))
        while True:
            step_start = time.monotonic() - t0
            due = min(window, int(step_start * rate) + 1 - taken if rate else CHUNK)
            grouped: dict[tuple[str, int], list[Entry]] = {}
            for msg in itertools.islice(source, max(due, 0)):
                key = card_key(msg)
                grouped.setdefault((name, partition_for(key, msg, partitions)), []).append(
                    (key, msg, ()))
                taken += 1
            if due > 0 and not grouped:
                break  # the log is exhausted
            pending.extend(await send_grouped(producer, grouped))
            in_flight += sum(len(entries) for entries in grouped.values())
            if in_flight >= window:
                await drain()
            if rate:
                elapsed = time.monotonic() - t0
                # pacing to the requested rate: until the next message is due, a step at least
                await asyncio.sleep(max(taken / rate - elapsed, step_start + PACE_STEP_S - elapsed,
                                        0.0))
        await drain()
    finally:
        await producer.stop()
    return ReplayReport(sent, errors, time.monotonic() - t0)
