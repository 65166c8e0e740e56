"""ActionDeliverer against a real in-process action service and Redis."""

from __future__ import annotations

import time

import pytest

from app.action_service.ledger import count_effects_async, read_effects_async
from app.actions.delivery import ActionDeliverer, Delivered, Rejected
from app.settings import load_settings

pytestmark = pytest.mark.integration


def _deliverer_settings(client, token: str):
    return load_settings(
        {},
        action_service_url=str(client.make_url("/")),
        action_token=token,
        dispatch_concurrency=8,
        dispatch_backoff_base_s=0.01,
        dispatch_backoff_cap_s=0.1,
    )


async def test_deliver_applies_then_replays_then_rejects_the_stale(
    client, redis, new_action, action_token
):
    fresh = new_action("freeze_card", "txn-d1", "card-d1")
    stale = new_action(
        "alert_customer",
        "txn-d2",
        "card-d2",
        decided_at_ms=time.time_ns() // 1_000_000 - 2 * 86_400_000,
    )
    async with ActionDeliverer(_deliverer_settings(client, action_token)) as deliverer:
        first = await deliverer.deliver(fresh)
        again = await deliverer.deliver(fresh)
        refused = await deliverer.deliver(stale)
    assert first == Delivered(201, replayed=False, attempts=1)
    assert again == Delivered(200, replayed=True, attempts=1)
    assert isinstance(refused, Rejected)
    assert refused.status == 410
    assert "decided_at_ms" in refused.body
    assert await count_effects_async(redis) == 1


async def test_deliver_many_applies_every_action_once(client, redis, new_action, action_token):
    actions = [new_action("alert_customer", f"txn-m{i}", f"card-m{i % 7}") for i in range(150)]
    async with ActionDeliverer(_deliverer_settings(client, action_token)) as deliverer:
        results = await deliverer.deliver_many(actions + actions[:50])
    assert all(isinstance(r, Delivered) for r in results)
    statuses = [r.status for r in results]
    assert (statuses.count(201), statuses.count(200)) == (150, 50)  # one 201 per key
    keys = [f["idempotency_key"] for _, f in await read_effects_async(redis)]
    assert sorted(keys) == sorted(a.idempotency_key for a in actions)


async def test_wrong_token_is_rejected_not_retried(client, new_action):
    async with ActionDeliverer(_deliverer_settings(client, "not-the-token")) as deliverer:
        result = await deliverer.deliver(new_action())
    assert isinstance(result, Rejected) and result.status == 401
