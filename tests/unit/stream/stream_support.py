"""A real FraudConsumer (through a real Faust app) with its broker I/O replaced, and messages."""

from __future__ import annotations

from typing import Any

import faust
from faust.types import TP, Message

A, B = TP("transactions", 0), TP("transactions", 1)


class Broker:
    """The consumer's I/O boundary: what is assigned, the log starts, and the seeks it made."""

    def __init__(self, assigned: set[TP], log_start: int = 3) -> None:
        self.assigned = set(assigned)
        self.log_start = log_start
        self.seeks: list[tuple[TP, int]] = []


def real_consumer(committed: dict[TP, int | None], assigned: set[TP] | None = None,
                  *, app_id: str = "unit") -> tuple[Any, Broker]:
    """`app.consumer` of a Faust app on the `fraudstream://` transport; nothing connects."""
    app = faust.App(app_id, broker="fraudstream://127.0.0.1:1", autodiscover=False)
    app.fraudstream_chunk_topics = frozenset({"transactions"})
    app.consumer_generation_id = 1
    consumer = app.consumer
    broker = Broker(assigned if assigned is not None else {A, B})

    async def earliest_offsets(*tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, broker.log_start)

    async def call_thread(fun: Any, *args: Any) -> Any:
        return fun(*args)

    consumer.assignment = lambda: broker.assigned
    consumer.earliest_offsets = earliest_offsets
    consumer._thread.call_thread = call_thread
    consumer._thread.seek = lambda tp, offset: broker.seeks.append((tp, offset))
    for tp, offset in committed.items():
        consumer._committed_offset[tp] = offset
    return consumer, broker


def message(tp: TP, offset: int, *, value: bytes = b"{}", timestamp: float = 0.0) -> Message:
    return Message(tp.topic, tp.partition, offset, timestamp, 0, [], b"k", value, None, tp=tp)
