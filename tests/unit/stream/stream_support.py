"""A real FraudConsumer (through a real Faust app) with its broker I/O replaced, and messages."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import faust
from faust.types import TP, Message

from app.stream.kafka.consumer import FraudConsumer
from app.stream.kafka.plan import ConsumerPlan
from app.stream.kafka.thread import Fetched, skipped_offsets

A, B = TP("transactions", 0), TP("transactions", 1)
#: A partition of the actions topic (chunked; in exactly_once written in transactions).
ACT = TP("actions", 0)


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
    app.consumer_plan = ConsumerPlan(chunk_topics=frozenset({"transactions"}))
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


async def call_now(fun: Any, *args: Any) -> Any:
    """The consumer thread's `call_thread`, run at once on the test's loop."""
    return fun(*args)


def acked(consumer: FraudConsumer, tp: TP, offsets: list[int]) -> None:
    """Books `offsets` of `tp` as acknowledged (and nothing else of it)."""
    consumer._acked[tp] = list(offsets)
    consumer._acked_index[tp] = set(offsets)


def eos_consumer(committed: int) -> FraudConsumer:
    """A consumer of an exactly_once app: `actions` is gapped, `transactions` transactional."""
    app = faust.App("unit-eos", broker="fraudstream://127.0.0.1:1", autodiscover=False)
    app.consumer_plan = ConsumerPlan(processing="exactly_once",
                                     chunk_topics=frozenset({"actions", "transactions"}),
                                     transactional_topics=frozenset({"transactions"}))
    app.consumer_generation_id = 1
    consumer = app.consumer
    consumer.assignment = lambda: {ACT, A}
    consumer._committed_offset[ACT] = committed
    consumer._committed_offset[A] = 0
    return consumer


def fetched(tp: TP, offsets: list[int], start: int, end: int) -> Fetched:
    """A fetch of `tp` that handed out `offsets`, its position going from `start` to `end`."""
    state = object()
    records = {tp: [SimpleNamespace(offset=o) for o in offsets]} if offsets else {}
    return Fetched(records, skipped_offsets({tp: (state, start)}, {tp: (state, end)}, records,
                                            {}))
