"""Redis (AOF, appendfsync always) restarted while actions stream in: no key or effect lost."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from app.actions import make_action
from app.harness.pipeline import effects, produce, with_own_service
from app.harness.procs import wait_until
from app.kafka import topics
from app.kafka.inspect import group_lag
from app.settings import Settings
from app.stack.manager import Stack
from tests.support.live import StartActionService, StartWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_redis_restart_mid_stream(fresh_settings: Settings,
                                  start_action_service: StartActionService,
                                  start_worker: StartWorker) -> None:
    stack = Stack(fresh_settings)
    if not stack.manages_redis:
        pytest.skip("Redis is external (REDIS_URL names another server)")
    settings = with_own_service(fresh_settings, redis_db=6)
    now = time.time_ns() // 1_000_000
    actions = [make_action("freeze_card" if i % 4 == 0 else "alert_customer",
                           card_id=f"c{i % 97}", txn_id=f"rr{i}", ts_ms=now, score=0.97,
                           model_version="m1", decided_at_ms=now) for i in range(3000)]
    service = start_action_service(settings)
    worker = start_worker(settings)
    producer = threading.Thread(target=produce, daemon=True, kwargs={
        "settings": settings, "logical": topics.ACTIONS, "rate": 600.0,
        "records": [(a.card_id.encode(), a.to_json()) for a in actions]})
    producer.start()
    wait_until(lambda: len(effects(settings.effective_redis_url)) > 300, timeout_s=60,
               what="effects to start flowing")
    applied_before = len(effects(settings.effective_redis_url))
    assert stack.redis.stop()
    assert stack.redis.start()
    stack.redis.wait_ready()
    # AOF with fsync always: every effect acknowledged before the restart is still there
    assert len(effects(settings.effective_redis_url)) >= applied_before
    producer.join(timeout=60)
    wait_until(lambda: asyncio.run(group_lag(settings, settings.app_id,
                                             settings.topic(topics.ACTIONS))) == 0
               and len(effects(settings.effective_redis_url)) == len(actions),
               timeout_s=120, what="every action to be applied")
    worker.stop()
    service.stop()
    per_key = Counter(e["idempotency_key"] for e in effects(settings.effective_redis_url))
    assert set(per_key) == {a.idempotency_key for a in actions}
    assert set(per_key.values()) == {1}
