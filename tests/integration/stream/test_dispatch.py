"""The dispatch agent against the real action service: each action applied once, refusals kept."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from app.actions import make_action
from app.harness.pipeline import effects, produce, read, with_own_service
from app.harness.procs import wait_until
from app.kafka import topics
from app.kafka.inspect import group_lag
from app.settings import Settings
from tests.support.live import StartActionService, StartWorker

pytestmark = pytest.mark.integration


def test_each_action_applied_once_and_refusals_dead_lettered(
    fresh_settings: Settings, start_action_service: StartActionService, start_worker: StartWorker
) -> None:
    settings = with_own_service(fresh_settings, redis_db=4)
    now = time.time_ns() // 1_000_000
    actions = [make_action("freeze_card" if i % 3 == 0 else "alert_customer",
                           card_id=f"c{i % 40}", txn_id=f"tx{i}", ts_ms=now - 1000,
                           score=0.99, model_version="m1", decided_at_ms=now) for i in range(300)]
    stale = make_action("alert_customer", card_id="c1", txn_id="tx-stale", ts_ms=now - 10**9,
                        score=0.9, model_version="m1", decided_at_ms=now - 2 * 86_400_000)
    records = [(a.card_id.encode(), a.to_json()) for a in actions]
    # every action twice (a replay), plus two that must be refused for good
    produce(settings, topics.ACTIONS, records + records[::-1] +
            [(b"c1", stale.to_json()), (b"c2", b"{not json")])
    service = start_action_service(settings)
    worker = start_worker(settings)
    wait_until(lambda: asyncio.run(group_lag(settings, settings.app_id,
                                             settings.topic(topics.ACTIONS))) == 0,
               timeout_s=120, what="the dispatcher to drain the actions topic")
    worker.stop()
    service.stop()
    ledger = effects(settings.effective_redis_url)
    per_key = Counter(e["idempotency_key"] for e in ledger)
    assert set(per_key) == {a.idempotency_key for a in actions}
    assert set(per_key.values()) == {1}
    dlq = read(settings, topics.ACTIONS_DLQ)
    assert sorted(r.headers["fraudstream.reason_code"] for r in dlq) == [
        "http_410", "invalid_invalid_json"]
    assert {r.value for r in dlq} == {stale.to_json(), b"{not json"}
