"""FraudConsumer: the transport behind `fraudstream://`, its version guard, the commit before a
revoke, and its diagnostics."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from faust.types import TP
from stream_support import A, B, acked, message, real_consumer

from app.stream.kafka.consumer import FraudConsumer, Transport, broker_url, check_faust_version


def test_the_fraudstream_scheme_selects_the_subclass() -> None:
    consumer, _ = real_consumer({})
    assert type(consumer) is FraudConsumer
    assert Transport.Consumer is FraudConsumer
    assert broker_url("h1:9092, h2:9092") == "fraudstream://h1:9092;h2:9092"


def test_an_untested_faust_version_is_refused_with_the_reason() -> None:
    check_faust_version("0.15.3")
    with pytest.raises(RuntimeError, match="faust-streaming 0.16.1 is not supported"):
        check_faust_version("0.16.1")
    with pytest.raises(RuntimeError, match="not supported"):
        check_faust_version("0.14.9")


async def test_a_revoke_commits_the_finished_work_before_faust_forgets_it() -> None:
    """Faust drops a revoked partition's acks before its own commit: without this, every
    rebalance (each worker that starts) re-read a commit interval of work on every partition."""
    consumer, _ = real_consumer({A: 10, B: 0})
    order: list[str] = []

    async def commit_on_thread(offsets: dict[TP, int]) -> bool:
        order.append(f"commit {sorted((tp.partition, o) for tp, o in offsets.items())}")
        return True

    async def settle() -> None:
        order.append("settle")

    async def faust_revoke(revoked: set[TP]) -> None:
        order.append("faust")

    consumer._thread.commit = commit_on_thread
    consumer.settlers = [settle]
    consumer._on_partitions_revoked = faust_revoke
    acked(consumer, A, [10, 11, 12])
    await consumer.on_partitions_revoked({A, B})
    assert order == ["settle", "commit [(0, 13)]", "faust"]
    assert A not in consumer._acked  # Faust's own bookkeeping is dropped afterwards


async def test_a_loop_that_does_not_settle_does_not_hold_the_rebalance(monkeypatch) -> None:
    """Faust's revoke waits without end for every read, unacked message: a loop stuck past
    the settle timeout held the whole group in its rebalance until the coordinator dropped
    this member (a minute, seen in exactly_once). Its messages are released instead: nothing
    is committed for them, the new owner reads them again."""
    monkeypatch.setattr("app.stream.kafka.consumer.SETTLE_ON_REVOKE_S", 0.05)
    consumer, _ = real_consumer({A: 10})
    committed: list[dict[TP, int]] = []

    async def commit_on_thread(offsets: dict[TP, int]) -> bool:
        committed.append(dict(offsets))
        return True

    async def stuck() -> None:
        await asyncio.sleep(3600)

    held = [message(A, 10), message(A, 11)]
    for m in held:
        consumer._unacked_messages.add(m)

    emptied: list[bool] = []

    async def faust_revoke(revoked: set[TP]) -> None:
        waiter = asyncio.ensure_future(consumer.wait_empty())  # what Faust's revoke does first
        done, _ = await asyncio.wait({waiter}, timeout=1.0)
        emptied.append(bool(done))
        if not done:
            waiter.cancel()

    consumer._thread.commit = commit_on_thread
    consumer.settlers = [stuck]
    consumer._on_partitions_revoked = faust_revoke
    await consumer.on_partitions_revoked({A})
    assert emptied == [True]
    assert not consumer._unacked_messages and committed == []
    assert not any(m.acked for m in held)


def test_fetch_positions_are_read_from_the_kafka_consumer_state() -> None:
    consumer, _ = real_consumer({A: 10})
    assert consumer.fetch_positions() == {}  # not started: nothing to read
    state = SimpleNamespace(_position=78)
    unpositioned = SimpleNamespace(_position=None)
    assignment = SimpleNamespace(_tp_state={A: state, B: unpositioned})
    consumer._thread._consumer = SimpleNamespace(
        _subscription=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment)))
    assert consumer.fetch_positions() == {A: 78}
