"""Kafka stopped and started mid-replay: nothing lost, offsets kept, the worker carries on."""

from __future__ import annotations

import asyncio
import threading

import orjson
import pytest

from app.harness.pipeline import dlq_sources, lines_of, make_log, read, wait_drained
from app.harness.procs import wait_all_assigned, wait_until
from app.kafka import topics
from app.kafka.inspect import _committed_offsets, admin_client, topic_sizes
from app.kafka.replay import ReplayReport, replay_messages
from app.settings import Settings
from app.stack.manager import Stack
from tests.support.live import StartWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def _committed_total(settings: Settings) -> int:
    async with admin_client(settings) as admin:
        offsets = await _committed_offsets(admin, settings.app_id)
    return sum(m.offset for tp, m in offsets.items()
               if tp.topic == settings.topic(topics.TRANSACTIONS) and m.offset > 0)


def test_broker_restart_mid_replay(fresh_settings: Settings, start_worker: StartWorker) -> None:
    stack = Stack(fresh_settings)
    if not stack.manages_kafka:
        pytest.skip("Kafka is external (KAFKA_BOOTSTRAP names another cluster)")
    log = make_log(cards=300, txns=12_000, seed=5, malformed=0.01)
    lines = lines_of(log)
    source = fresh_settings.topic(topics.TRANSACTIONS)
    # no dispatcher: nothing here answers its POSTs, and its retries would hold the rebalance
    # the broker restart causes
    worker = start_worker(fresh_settings, dispatch=False)
    result: dict[str, ReplayReport] = {}

    def produce() -> None:
        result["report"] = asyncio.run(replay_messages(fresh_settings, lines, rate=2_000))

    producer = threading.Thread(target=produce, daemon=True)
    # the worker in the group first, so that its first commit comes while the replay runs
    wait_all_assigned([worker], source)
    producer.start()
    wait_until(lambda: asyncio.run(_committed_total(fresh_settings)) > 0, timeout_s=60,
               what="a first offset commit")
    committed_before = asyncio.run(_committed_total(fresh_settings))
    in_before = asyncio.run(topic_sizes(fresh_settings, [source]))[source]
    assert producer.is_alive() and in_before < len(lines), (
        f"the replay was over ({in_before}/{len(lines)} in) before the broker stopped")
    assert stack.kafka.stop(), "the broker was not ours to stop"
    # still running with the broker down: the restart hit a replay in flight, which had to
    # carry on against the restarted broker
    assert producer.is_alive(), "the replay finished while the broker was stopping"
    assert stack.kafka.start()
    stack.kafka.wait_ready()
    producer.join(timeout=180)
    assert not producer.is_alive(), "replay did not finish after the broker came back"
    report = result["report"]
    assert report.errors == 0 and report.sent == len(lines)
    # nothing lost and, with the idempotent producer, nothing doubled
    assert asyncio.run(topic_sizes(fresh_settings, [source]))[source] == len(lines)
    # committed offsets survived the restart (the coordinator reloads them; never back to 0)
    wait_until(lambda: asyncio.run(_committed_total(fresh_settings)) >= committed_before,
               timeout_s=60, what="committed offsets to be readable again")
    wait_drained(fresh_settings, [worker], expected=len(lines), timeout_s=240)
    worker.stop()
    served = read(fresh_settings, topics.FEATURES_SERVED)
    late = read(fresh_settings, topics.TRANSACTIONS_LATE)
    # every malformed line dead-lettered; a batch re-read after the restart may repeat some
    assert len(dlq_sources(fresh_settings)) == log.counts.malformed
    # every valid transaction was served at least once (a restart may legitimately redeliver)
    served_ids = {orjson.loads(r.value)["txn_id"] for r in served}
    assert len(served_ids) + len(late) == log.counts.transactions
