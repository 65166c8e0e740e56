"""The score engine: live batches send their outputs at once; card state once per interval, also
when the input goes idle; nothing of a batch is acked before a snapshot covers it."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from faust.types import TP
from stream_support import message, real_consumer

from app.stream.engine.checkpoint import Checkpoint
from app.stream.engine.engine import ScoreEngine
from app.stream.engine.pipeline import TransactionPipeline
from app.stream.kafka.chunks import Chunk
from app.stream.kafka.sequencer import PartitionSequencer
from app.stream.state import cardrecord

T0 = 1_767_225_600_000
TX = TP("transactions", 0)


class Store:
    def load(self, card_id: str) -> bytes | None:
        return None

    def save(self, card_id: str, data: bytes, partition: int) -> None:
        raise AssertionError("the engine writes cards through the checkpoint")


class Broker:
    """Acknowledges every produce at once and records what was written."""

    def __init__(self) -> None:
        self.outputs: list[int] = []
        self.cards: list[set[bytes]] = []

    async def send(self, records: Any) -> list[asyncio.Future[None]]:
        self.outputs.append(len(records))
        return [_done()]

    def stage(self, cards: Any) -> None:
        pass  # nothing is read back before it is written here

    async def write(self, cards: Any) -> list[asyncio.Future[None]]:
        self.cards.append(set(cards))
        return [_done()]


def _done() -> asyncio.Future[None]:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    return fut


class Stage:
    def run(self, scored: Any) -> list[Any]:
        return []


def txn(i: int, card: str) -> bytes:
    return orjson.dumps({"txn_id": f"t{i}", "card_id": card, "ts_ms": T0 + i * 1000,
                         "amount_minor": 1000, "currency": "EUR", "merchant_id": "m1",
                         "mcc": 5411, "country": "FR", "channel": "pos"})


def setup(**intervals: float) -> tuple[Any, Broker, ScoreEngine]:
    """A real consumer of partition TX, a broker that acknowledges at once, and the engine."""
    consumer, _ = real_consumer({TX: 0}, assigned={TX})
    consumer.app.topics.acks_enabled_for = lambda topic: True
    broker = Broker()
    pipeline = TransactionPipeline(Store(), clock_ms=lambda: T0 + 86_400_000,
                                   allowed_lateness_ms=300_000, max_message_bytes=65_536)
    engine = ScoreEngine(
        consumer.app, pipeline, Stage(), PartitionSequencer(consumer.app),
        lambda ack: Checkpoint(broker.send, broker, ack, max_in_flight=4),
        topic="transactions", max_batch=64, **intervals)
    return consumer, broker, engine


async def wait_for(condition: Any, timeout_s: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)  # poll interval of a deadline-bounded wait


async def test_live_batches_share_one_snapshot_when_the_idle_input_makes_it_due(
) -> None:
    consumer, broker, engine = setup(state_interval_s=10.0, idle_state_interval_s=0.3)
    queue = consumer.chunk_queue("transactions")
    task = asyncio.ensure_future(engine.run())
    try:
        t0 = asyncio.get_running_loop().time()
        for i, card in enumerate(["c1", "c2", "c1"]):  # three live batches, input idle between
            m = message(TX, i, value=txn(i, card))
            consumer._unacked_messages.add(m)
            queue.put_nowait(Chunk(1, [m]))
            await wait_for(lambda n=i: len(broker.outputs) == n + 1)
        # outputs went at once, batch by batch; no card written, nothing acked yet
        assert broker.cards == [] and not consumer._acked.get(TX)
        await wait_for(lambda: broker.cards, timeout_s=2.0)
        assert asyncio.get_running_loop().time() - t0 >= 0.25  # not before it fell due
        assert broker.cards == [{b"c1", b"c2"}]  # one record per card for all three batches
        assert consumer._acked[TX] == [0, 1, 2]
        await asyncio.sleep(0.4)  # an idle window longer than the idle interval: no snapshot
        assert len(broker.cards) == 1  # nothing changed since: no empty snapshot
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_with_no_interval_every_batch_carries_its_cards() -> None:
    consumer, broker, engine = setup(state_interval_s=0.0)
    queue = consumer.chunk_queue("transactions")
    task = asyncio.ensure_future(engine.run())
    try:
        for i, card in enumerate(["c1", "c2"]):
            m = message(TX, i, value=txn(i, card))
            consumer._unacked_messages.add(m)
            queue.put_nowait(Chunk(1, [m]))
            await wait_for(lambda n=i: len(broker.cards) == n + 1)
        assert broker.cards == [{b"c1"}, {b"c2"}]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_past_max_held_served_messages_no_input_is_taken_until_they_are_durable() -> None:
    """A load above what the worker makes durable in step piled served messages up in memory
    (53-143k under overload): past `max_held` the engine snapshots at once and waits for the
    durable point before it takes more, so the rest waits in the queue (and in Kafka)."""
    consumer, broker, engine = setup(state_interval_s=10.0, idle_state_interval_s=10.0)
    engine.max_held = 3
    writes: list[asyncio.Future[None]] = []

    async def slow_write(cards: Any) -> list[asyncio.Future[None]]:
        broker.cards.append(set(cards))
        writes.append(asyncio.get_running_loop().create_future())
        return [writes[-1]]

    broker.write = slow_write
    queue = consumer.chunk_queue("transactions")
    for n in range(3):  # three chunks of two, all waiting: a backlog
        chunk = [message(TX, 2 * n + i, value=txn(2 * n + i, f"c{2 * n + i}")) for i in (0, 1)]
        consumer._unacked_messages.update(chunk)
        queue.put_nowait(Chunk(1, chunk))
    engine.max_batch = 2
    task = asyncio.ensure_future(engine.run())
    try:
        await wait_for(lambda: writes)  # the second batch made it hold 4 >= 3: a snapshot now
        assert len(broker.outputs) == 2 and broker.cards == [{b"c0", b"c1", b"c2", b"c3"}]
        await asyncio.sleep(0.05)
        assert len(broker.outputs) == 2 and queue.qsize() == 1  # nothing more taken meanwhile
        assert engine.checkpoint.held == 4 and not consumer._acked.get(TX)
        broker.write = Broker.write.__get__(broker)  # from here on acknowledged at once
        writes[0].set_result(None)
        await wait_for(lambda: len(broker.outputs) == 3)
        assert consumer._acked[TX] == [0, 1, 2, 3] and engine.checkpoint.held == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_large_snapshot_is_taken_in_slices_with_batches_in_between(
        monkeypatch: Any) -> None:
    """A snapshot of more cards than a slice is serialized over several steps between batches;
    a card a batch changes again meanwhile goes in as that batch left it, and the snapshot
    covers every batch submitted before it is sealed (nothing acked before)."""
    monkeypatch.setattr("app.stream.engine.engine.SNAPSHOT_SLICE", 2)
    consumer, broker, engine = setup(state_interval_s=10.0, idle_state_interval_s=10.0)
    written: list[dict[bytes, Any]] = []

    async def write(cards: Any) -> list[asyncio.Future[None]]:
        written.append(dict(cards))
        return [_done()]

    broker.write = write
    runner = asyncio.ensure_future(engine.checkpoint.run())
    try:
        first = [message(TX, i, value=txn(i, f"c{i}")) for i in range(5)]
        consumer._unacked_messages.update(first)
        await engine.process(Chunk(1, first))
        engine._snapshot_step(2)  # c0, c1 serialized; c2..c4 left
        assert engine._snapshotting
        assert set(engine._partial) == {b"c0", b"c1"} and engine.pipeline.changed_cards == 3
        again = message(TX, 5, value=txn(5, "c0"))  # c0 changed again, after its slice
        consumer._unacked_messages.add(again)
        await engine.process(Chunk(1, [again]))  # a step per batch while one is under way
        assert set(engine._partial) == {b"c0", b"c1", b"c2", b"c3"} and not written
        engine._seal()
        await engine.checkpoint.drain()
        [cards] = written
        assert set(cards) == {b"c0", b"c1", b"c2", b"c3", b"c4"}
        assert cardrecord.unpack(cards[b"c0"][1]).offset == 5  # as the second batch left it
        assert consumer._acked[TX] == [0, 1, 2, 3, 4, 5] and not engine._snapshotting
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
