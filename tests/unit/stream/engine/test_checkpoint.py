"""The checkpoint's order of durability (outputs → card state → ack), pipelining, and aborts
between every step followed by a restart that loses nothing and re-emits the same actions."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from app.kafka import topics
from app.kafka.records import OutRecord, SourceMessage
from app.stream.engine.checkpoint import Checkpoint, CheckpointFailed
from app.stream.engine.pipeline import DictCards, TransactionPipeline
from app.stream.state import cardrecord

T0 = 1_767_225_600_000
NOW = T0 + 86_400_000


class Broker:
    """Delivery futures the test resolves by hand, and what was made durable."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, Any, asyncio.Future[None]]] = []
        self.log: list[str] = []

    async def send(self, records: Any) -> list[asyncio.Future[None]]:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(("outputs", records, fut))
        self.log.append(f"send {records}")
        return [fut]

    def stage(self, cards: Any) -> None:
        pass  # nothing is read back before it is written here

    async def write(self, cards: Any) -> list[asyncio.Future[None]]:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(("cards", dict(cards), fut))
        self.log.append(f"write {sorted(cards)}")
        return [fut]

    def ack_next(self, kind: str) -> Any:
        for i, (k, what, fut) in enumerate(self.pending):
            if k == kind:
                del self.pending[i]
                fut.set_result(None)
                return what
        raise AssertionError(f"nothing {kind} pending: {self.pending}")


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
async def running() -> Any:
    broker = Broker()
    acked: list[Any] = []
    ckpt = Checkpoint(broker.send, broker, lambda msgs: acked.extend(msgs), max_in_flight=2)
    task = asyncio.ensure_future(ckpt.run())
    yield ckpt, broker, acked
    task.cancel()


async def test_state_follows_outputs_and_acks_follow_state(running: Any) -> None:
    ckpt, broker, acked = running
    await ckpt.submit("k1", {b"c1": (0, b"s1")}, ["m1"])
    await settle()
    assert broker.log == ["send k1"]  # no state before the outputs are acknowledged
    broker.ack_next("outputs")
    await settle()
    assert broker.log == ["send k1", "write [b'c1']"] and acked == []
    broker.ack_next("cards")
    await settle()
    assert acked == ["m1"]
    await ckpt.drain()


async def test_later_batches_are_sent_while_earlier_ones_wait_and_merge(running: Any) -> None:
    ckpt, broker, acked = running
    await ckpt.submit("k1", {b"c1": (0, b"s1")}, ["m1"])
    await ckpt.submit("k2", {b"c1": (0, b"s2"), b"c2": (1, b"t2")}, ["m2"])
    assert broker.log == ["send k1", "send k2"]  # both in flight
    broker.ack_next("outputs")  # k1
    broker.ack_next("outputs")  # k2, before k1's state went out
    await settle()
    # one state write for both, the newest record per card
    assert broker.ack_next("cards") == {b"c1": (0, b"s2"), b"c2": (1, b"t2")}
    await settle()
    assert acked == ["m1", "m2"]


async def test_in_flight_batches_are_bounded(running: Any) -> None:
    ckpt, broker, _ = running
    await ckpt.submit("k1", {}, ["m1"])
    await ckpt.submit("k2", {}, ["m2"])
    third = asyncio.ensure_future(ckpt.submit("k3", {}, ["m3"]))
    await settle()
    assert not third.done()  # two in flight: the engine waits
    broker.ack_next("outputs")
    await settle()
    assert third.done()


async def test_batches_without_a_snapshot_wait_for_the_next_one_and_complete_with_it(
        running: Any) -> None:
    ckpt, broker, acked = running
    await ckpt.submit("k1", None, ["m1"])
    await ckpt.submit("k2", None, ["m2"])
    broker.ack_next("outputs")
    broker.ack_next("outputs")
    await settle()
    # outputs durable, but no snapshot covers them yet: no state, no ack, and no longer in
    # flight (a third batch is not held back by the bound of two)
    assert broker.log == ["send k1", "send k2"] and acked == []
    await asyncio.wait_for(ckpt.submit("k3", {b"c1": (0, b"s3"), b"c2": (1, b"t3")}, ["m3"]), 1)
    await settle()
    assert broker.log[-1] == "send k3" and acked == []  # k3's outputs come before any state
    broker.ack_next("outputs")
    await settle()
    assert broker.ack_next("cards") == {b"c1": (0, b"s3"), b"c2": (1, b"t3")}
    await settle()
    assert acked == ["m1", "m2", "m3"] and ckpt.in_flight == 0


async def test_seal_gives_the_newest_batch_the_snapshot_and_drain_waits_for_it(
        running: Any) -> None:
    ckpt, broker, acked = running
    await ckpt.submit("k1", {b"c1": (0, b"s1")}, ["m1"])
    await ckpt.submit("k2", None, ["m2"])
    assert not ckpt.sealed
    broker.ack_next("outputs")
    broker.ack_next("outputs")
    await settle()
    assert broker.ack_next("cards") == {b"c1": (0, b"s1")}  # k1 alone: k2 has no snapshot
    await settle()
    assert acked == ["m1"]
    await asyncio.wait_for(ckpt.drain(), 1)  # nothing sealed is pending: k2 is left as it is
    ckpt.seal({b"c1": (0, b"s2")})
    assert ckpt.sealed
    ckpt.seal({b"c9": (0, b"ignored")})  # already sealed: no second snapshot
    drained = asyncio.ensure_future(ckpt.drain())
    await settle()
    assert not drained.done()
    assert broker.ack_next("cards") == {b"c1": (0, b"s2")}
    await asyncio.wait_for(drained, 1)
    assert acked == ["m1", "m2"]


async def test_a_failed_delivery_writes_no_state_acks_nothing_and_stops_the_engine() -> None:
    broker = Broker()
    acked: list[Any] = []
    ckpt = Checkpoint(broker.send, broker, lambda msgs: acked.extend(msgs))
    task = asyncio.ensure_future(ckpt.run())
    await ckpt.submit("k1", {b"c1": (0, b"s1")}, ["m1"])
    broker.pending[0][2].set_exception(RuntimeError("broker gone"))
    with pytest.raises(RuntimeError):
        await task
    assert broker.log == ["send k1"] and acked == []
    with pytest.raises(CheckpointFailed):
        await ckpt.submit("k2", {}, ["m2"])
    with pytest.raises(CheckpointFailed):
        await ckpt.drain()


# --- abort between each step, restart, compare with a run that never crashed ----------------

def txn(i: int, card: str) -> bytes:
    amount = 1_000_000 if i % 7 == 0 else 1000  # some transactions decide actions
    return orjson.dumps({"txn_id": f"t{i}", "card_id": card, "ts_ms": T0 + i * 1000,
                         "amount_minor": amount, "currency": "EUR", "merchant_id": f"m{i}",
                         "mcc": 5411, "country": "FR", "channel": "pos"})


LOG = [SourceMessage("transactions", 0, i, f"c{i % 3}".encode(), txn(i, f"c{i % 3}"))
       for i in range(30)]


def outputs_of(pipeline: TransactionPipeline, batch: list[SourceMessage], snapshot: bool = True
               ) -> tuple[Any, Any]:
    out = pipeline.process(batch, snapshot=snapshot)
    records = list(out.records)
    for item in out.scored:  # a stand-in for scoring: an action per transaction, keyed by it
        records.append(OutRecord(topics.ACTIONS, item.txn.card_id.encode(),
                                 f"freeze:{item.txn.txn_id}:{item.features}".encode()))
    return records, out.saves


STEPS = ("outputs sent", "outputs acked", "state written", "acked")


async def run_until_abort(store: DictCards, durable: list[OutRecord], committed: list[int],
                          batches: list[list[SourceMessage]], abort: tuple[int, str] | None,
                          every: int = 1) -> None:
    """Process batches through a real Checkpoint; stop dead at `abort` = (batch, step).
    A snapshot of the changed cards goes with every `every`-th batch and the last one."""
    pipeline = TransactionPipeline(store, clock_ms=lambda: NOW, allowed_lateness_ms=300_000,
                                   max_message_bytes=8192)
    sent: list[tuple[Any, asyncio.Future[None]]] = []

    async def send(records: Any) -> list[asyncio.Future[None]]:
        fut = asyncio.get_running_loop().create_future()
        sent.append((records, fut))
        return [fut]

    class Cards:
        def stage(self, cards: Any) -> None:
            pass  # nothing is read back before it is written here

        async def write(self, cards: Any) -> list[asyncio.Future[None]]:
            for key, (part, rec) in cards.items():
                store.save(key.decode(), rec, part)
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(None)
            return [fut]

    ckpt = Checkpoint(send, Cards(), lambda msgs: committed.extend(m.offset for m in msgs))
    task = asyncio.ensure_future(ckpt.run())
    try:
        for n, batch in enumerate(batches):
            if n < len(batches) and committed and batch[-1].offset < committed[-1]:
                continue
            snapshot = n % every == every - 1 or n == len(batches) - 1
            records, saves = outputs_of(pipeline, batch, snapshot)
            if abort == (n, STEPS[0]):
                return  # sent, never acknowledged: nothing of it is durable
            await ckpt.submit(records, {k.encode(): v for k, v in saves.items()}
                              if snapshot else None, batch)
            fut = sent[-1][1]
            durable.extend(records)
            if abort == (n, STEPS[1]):
                return  # outputs durable, the process dies before writing state
            if abort == (n, STEPS[2]):
                # state written too (the changelog went out), the process dies before the ack
                for key, (part, rec) in saves.items():
                    store.save(key, rec, part)
                return
            fut.set_result(None)
            await ckpt.drain()
            await settle()  # whatever else the checkpoint would do with this batch, it does
            if abort == (n, STEPS[3]):
                return
    finally:
        task.cancel()


def actions(records: list[OutRecord]) -> set[bytes]:
    return {r.value for r in records if r.topic == topics.ACTIONS}


@pytest.mark.parametrize("every", [1, 3], ids=["snapshot-each-batch", "snapshot-every-3rd"])
@pytest.mark.parametrize("abort", [(b, s) for b in (0, 2, 3) for s in STEPS])
async def test_abort_between_any_two_steps_then_resume_gives_the_same_effects(
        abort: Any, every: int) -> None:
    batches = [LOG[i:i + 5] for i in range(0, len(LOG), 5)]
    clean_store, clean_out = DictCards(), []
    await run_until_abort(clean_store, clean_out, [], batches, None)

    store, durable, committed = DictCards(), [], []
    await run_until_abort(store, durable, committed, batches, abort, every)
    if every > 1 and abort[0] < every - 1:
        assert committed == []  # no snapshot yet: nothing may be committed
    resume_at = (committed[-1] + 1) if committed else 0  # the committed offset
    rest = [m for m in LOG if m.offset >= resume_at]
    await run_until_abort(store, durable, committed, [rest[i:i + 5] for i in
                                                     range(0, len(rest), 5)], None, every)
    assert actions(durable) == actions(clean_out)  # every action, and no other
    assert {k: cardrecord.unpack(v).state.tobytes() for k, v in store.data.items()} == \
        {k: cardrecord.unpack(v).state.tobytes() for k, v in clean_store.data.items()}
    assert sorted(set(committed)) == list(range(len(LOG)))
