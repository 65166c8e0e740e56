"""The service SIGKILLed and restarted under load: every action still applied exactly once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from app.action_service.ledger import count_effects_async, read_effects_async
from app.actions.delivery import ActionDeliverer, Delivered
from app.settings import load_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ACTIONS = 600
KILL_AT = (150, 350)  # effects-stream lengths at which the service is SIGKILLed


async def _wait_for_effects(redis, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while await count_effects_async(redis) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} effects after {timeout_s} s")
        await asyncio.sleep(0.01)  # poll with a deadline


async def test_sigkill_and_restart_mid_stream_applies_every_action_once(
    service_process, redis, new_action, make_settings
):
    service = service_process()
    await asyncio.to_thread(service.start)
    settings = load_settings(
        {},
        action_service_url=service.url,
        action_token=make_settings().action_token,
        dispatch_concurrency=16,
        dispatch_backoff_base_s=0.02,
        dispatch_backoff_cap_s=0.3,
        dispatch_request_timeout_s=5.0,
    )
    actions = [
        new_action(
            "freeze_card" if i % 3 == 0 else "alert_customer", f"txn-k{i}", f"card-k{i % 97}"
        )
        for i in range(ACTIONS)
    ]

    async def chaos() -> int:
        kills = 0
        for threshold in KILL_AT:
            await _wait_for_effects(redis, threshold, timeout_s=60)
            service.kill()
            kills += 1
            await asyncio.to_thread(service.start)
        return kills

    async with ActionDeliverer(settings) as deliverer:
        chaos_task = asyncio.create_task(chaos())
        results = await asyncio.wait_for(deliverer.deliver_many(actions), timeout=120)
        kills = await asyncio.wait_for(chaos_task, timeout=60)

    assert kills == len(KILL_AT)
    assert all(isinstance(r, Delivered) for r in results), [
        r for r in results if not isinstance(r, Delivered)
    ]
    entries = await read_effects_async(redis)
    per_key = Counter(fields["idempotency_key"] for _, fields in entries)
    assert len(entries) == ACTIONS
    assert set(per_key) == {a.idempotency_key for a in actions}
    assert max(per_key.values()) == 1
    retried = [r for r in results if r.attempts > 1]
    assert retried, "the kills should have forced some retries"


async def test_sigterm_stops_the_service_gracefully(service_process):
    service = service_process()
    await asyncio.to_thread(service.start)
    assert service.terminate() == 0
