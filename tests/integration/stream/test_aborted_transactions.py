"""exactly_once: what an aborted transaction wrote has no effect on the worker's own readers.

A transaction holding an action with a fresh key, a served row and a block-list entry is aborted
on the real broker; committed records follow it on the same topics. The dispatcher, the control
follower and a read_committed reader of features.served must skip the aborted records and act on
the committed ones (a reader at read_uncommitted would freeze the aborted action's card, count a
second block entry and see the served row)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from app.actions import make_action
from app.harness.pipeline import effects, produce, with_own_service
from app.harness.procs import http_ready, spawn_action_service, spawn_worker, wait_until
from app.kafka import topics
from app.kafka.inspect import read_topic
from app.scoring.lists import ListEntry
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from tests.integration.stream.test_lists_live import _applied

pytestmark = [pytest.mark.integration]

MARK = "aborted-row"


async def _write_and_abort(settings: Settings,
                           records: list[tuple[str, bytes, bytes]]) -> None:
    """Write `records` (logical topic, key, value) in one transaction, then abort it."""
    producer = AIOKafkaProducer(**kafka_client_kwargs(settings),
                                transactional_id=f"{settings.app_id}-test-abort",
                                enable_idempotence=True, acks="all")
    await producer.start()
    try:
        await producer.begin_transaction()
        for logical, key, value in records:
            await (await producer.send(settings.topic(logical), value, key=key))
        await producer.abort_transaction()
    finally:
        await producer.stop()


def _served(settings: Settings) -> list[bytes]:
    """features.served as `settings`' isolation level reads it."""
    return [r.value for r in asyncio.run(read_topic(
        settings, settings.topic(topics.FEATURES_SERVED), timeout_s=60.0))]


def test_an_aborted_transaction_changes_nothing_a_committed_one_does(
        fresh_settings: Settings, tmp_path: Path) -> None:
    settings = with_own_service(fresh_settings, redis_db=8).replace(processing="exactly_once")
    assert settings.isolation_level == "read_committed"
    now = time.time_ns() // 1_000_000

    def action(card: str, txn: str) -> bytes:
        return make_action("freeze_card", card_id=card, txn_id=txn, ts_ms=now - 1000,
                           score=0.99, model_version="m1", decided_at_ms=now).to_json()

    aborted_action, committed_action = action("c-aborted", "tx-aborted"), action(
        "c-committed", "tx-committed")
    aborted_key = orjson.loads(aborted_action)["idempotency_key"]
    committed_key = orjson.loads(committed_action)["idempotency_key"]
    aborted_entry = ListEntry("block", "card", "c-aborted", "mule", "test", now)
    committed_entry = ListEntry("block", "card", "c-committed", "mule", "test", now)

    service = spawn_action_service(settings, tmp_path)
    worker = spawn_worker(settings, tmp_path)
    try:
        wait_until(lambda: http_ready(f"{settings.action_service_url}/readyz"), timeout_s=30,
                   what="the action service")
        asyncio.run(_write_and_abort(settings, [
            (topics.ACTIONS, b"c-aborted", aborted_action),
            (topics.FEATURES_SERVED, b"c-aborted", orjson.dumps({"mark": MARK})),
            (topics.CONTROL, aborted_entry.control_key(), aborted_entry.to_json()),
        ]))
        # committed records after the aborted ones, on the same topics: once the worker has
        # acted on these, it has read past the aborted transaction
        produce(settings, topics.ACTIONS, [(b"c-committed", committed_action)])
        produce(settings, topics.CONTROL, [(committed_entry.control_key(),
                                            committed_entry.to_json())])
        wait_until(lambda: committed_key in {
            e["idempotency_key"] for e in effects(settings.effective_redis_url)},
            timeout_s=120, what="the dispatcher to apply the committed action")
        wait_until(lambda: _applied(worker.port).get("block", 0.0) >= 1.0, timeout_s=60,
                   what="the worker to read the committed block entry")
        applied = _applied(worker.port)
        ledger = {e["idempotency_key"] for e in effects(settings.effective_redis_url)}
    finally:
        worker.stop()
        service.stop()
    assert aborted_key not in ledger, "the dispatcher applied an action of an aborted transaction"
    assert ledger == {committed_key}
    assert applied.get("block") == 1.0, f"the worker's block list holds {applied}"
    # the served row was written (a read_uncommitted reader sees it), committed readers do not
    uncommitted = settings.replace(processing="at_least_once")
    assert uncommitted.isolation_level == "read_uncommitted"
    assert any(MARK.encode() in v for v in _served(uncommitted))
    assert not any(MARK.encode() in v for v in _served(settings))
