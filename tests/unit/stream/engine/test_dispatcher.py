"""The dispatcher: chunks of the actions topic delivered, acked once delivered, never across a rebalance."""

from __future__ import annotations

import contextlib
from typing import Any

from faust.types import TP
from stream_support import message, real_consumer

from app.actions.action import Action, make_action
from app.actions.delivery import Delivered
from app.stream.engine.dispatch import Dispatcher
from app.stream.kafka.chunks import Chunk

ACT = TP("actions", 0)


def action_bytes(n: int) -> bytes:
    return make_action("freeze_card", card_id="c1", txn_id=f"t{n}", ts_ms=1_767_225_600_000,
                       score=0.9, model_version="m1", decided_at_ms=1_767_225_600_000).to_json()


class FakeDeliverer:
    def __init__(self, on_deliver: Any = None) -> None:
        self.delivered: list[str] = []
        self.on_deliver = on_deliver

    async def deliver(self, action: Action) -> Any:
        self.delivered.append(action.txn_id)
        if self.on_deliver is not None:
            self.on_deliver()
        return Delivered(201, False, 1)


def setup() -> tuple[Dispatcher, Any, list[Any]]:
    consumer, _ = real_consumer({ACT: 0}, assigned={ACT})
    consumer.app.topics.acks_enabled_for = lambda topic: True
    sent: list[Any] = []

    async def send(records: Any) -> None:
        sent.extend(records)

    return Dispatcher(consumer.app, "actions", send, contextlib.nullcontext,
                      max_batch=64), consumer, sent


def tracked(consumer: Any, offsets: range) -> list[Any]:
    out = [message(ACT, i, value=action_bytes(i)) for i in offsets]
    for m in out:
        consumer._unacked_messages.add(m)
    return out


async def test_a_batch_is_acked_once_every_action_is_delivered_and_bad_ones_dead_lettered() -> None:
    dispatcher, consumer, sent = setup()
    messages = tracked(consumer, range(3))
    bad = message(ACT, 3, value=b"{not json")
    consumer._unacked_messages.add(bad)
    deliverer = FakeDeliverer()
    await dispatcher.process(deliverer, Chunk(1, [*messages, bad]))
    assert deliverer.delivered == ["t0", "t1", "t2"]
    assert [r.topic for r in sent] == ["actions.dlq"]
    assert consumer._acked[ACT] == [0, 1, 2, 3]
    assert consumer._new_offset(ACT) == 4


async def test_a_chunk_of_an_older_generation_is_released_not_delivered() -> None:
    dispatcher, consumer, _ = setup()
    messages = tracked(consumer, range(2))
    deliverer = FakeDeliverer()
    await dispatcher.process(deliverer, Chunk(0, messages))
    assert deliverer.delivered == [] and not consumer._acked.get(ACT)
    assert not consumer._unacked_messages  # read again from the commit, nothing waits for it


async def test_a_rebalance_during_delivery_releases_the_batch_instead_of_acking_it() -> None:
    dispatcher, consumer, _ = setup()
    messages = tracked(consumer, range(2))

    def rebalance() -> None:
        consumer.app.consumer_generation_id = 2

    await dispatcher.process(FakeDeliverer(rebalance), Chunk(1, messages))
    assert not consumer._acked.get(ACT)  # its new owner delivers again (same keys: absorbed)
    assert not consumer._unacked_messages


async def test_queued_chunks_of_one_generation_make_one_batch() -> None:
    dispatcher, consumer, _ = setup()
    queue = consumer.chunk_queue("actions")
    queue.put_nowait(Chunk(1, tracked(consumer, range(0, 2))))
    queue.put_nowait(Chunk(1, tracked(consumer, range(2, 4))))
    queue.put_nowait(Chunk(2, tracked(consumer, range(4, 5))))
    first = await dispatcher._take()
    assert [m.offset for m in first.messages] == [0, 1, 2, 3]
    assert not dispatcher.idle() or queue.qsize() == 1
    second = await dispatcher._take()
    assert (second.generation, [m.offset for m in second.messages]) == (2, [4])
    assert dispatcher.idle()
