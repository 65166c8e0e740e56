"""Key expiry and the 410 guard, with a TTL of seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from app.action_service.app import create_app
from app.action_service.ledger import count_effects_async
from app.action_service.redis_keys import idem_key
from app.actions import Action

pytestmark = pytest.mark.integration

TTL_S = 2
MARGIN_S = 1  # so actions decided >= 1 s ago with an unknown key are refused


@pytest.fixture
async def short(make_settings):
    settings = make_settings(idempotency_ttl_s=TTL_S, idempotency_margin_s=MARGIN_S)
    async with TestClient(TestServer(create_app(settings))) as test_client:
        yield test_client


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _post(client: TestClient, auth: Callable[..., dict[str, str]],
                act: Action) -> ClientResponse:
    """POST /v1/actions of `act` under its own idempotency key."""
    return await client.post("/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key))


async def _wait_until_gone(redis, key: str, timeout_s: float = 2 * TTL_S + 3) -> None:
    deadline = time.monotonic() + timeout_s
    while await redis.exists(key):
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} did not expire within {timeout_s} s")
        await asyncio.sleep(0.05)  # poll with a deadline


async def test_key_expires_and_a_late_replay_is_410_not_a_second_effect(
    short, redis, auth, new_action
):
    act = new_action("freeze_card", "txn-exp", "card-exp")
    headers = auth(act.idempotency_key)
    assert (await short.post("/v1/actions", data=act.to_json(), headers=headers)).status == 201
    assert 0 < await redis.pttl(idem_key(act.idempotency_key, act.card_id)) <= TTL_S * 1000
    assert (await short.post("/v1/actions", data=act.to_json(), headers=headers)).status == 200

    await _wait_until_gone(redis, idem_key(act.idempotency_key, act.card_id))
    late = await short.post("/v1/actions", data=act.to_json(), headers=headers)
    assert late.status == 410
    assert (await late.json())["field"] == "decided_at_ms"
    assert await count_effects_async(redis) == 1
    assert await redis.exists(idem_key(act.idempotency_key, act.card_id)) == 0
    missing = await short.get(f"/v1/actions/{act.idempotency_key}", headers=auth())
    assert missing.status == 404


async def test_old_action_with_unknown_key_is_410(short, redis, auth, new_action):
    old = new_action("alert_customer", "txn-old", "card-old", decided_at_ms=_now_ms() - 1_500)
    response = await _post(short, auth, old)
    assert response.status == 410
    assert await count_effects_async(redis) == 0
    assert "action_service_gone_total 1.0" in await (await short.get("/metrics")).text()


async def test_old_action_whose_key_still_exists_is_a_harmless_replay(
    short, redis, auth, new_action
):
    fresh = new_action("freeze_card", "txn-keep", "card-keep")
    old = new_action(
        "freeze_card", "txn-keep", "card-keep", ts_ms=fresh.ts_ms, decided_at_ms=_now_ms() - 1_500
    )
    assert (await _post(short, auth, fresh)).status == 201
    replay = await _post(short, auth, old)
    assert replay.status == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert await count_effects_async(redis) == 1


async def test_just_inside_the_window_is_applied(short, redis, auth, new_action):
    recent = new_action("freeze_card", "txn-recent", "card-recent", decided_at_ms=_now_ms() - 300)
    response = await _post(short, auth, recent)
    assert response.status == 201
    assert await count_effects_async(redis) == 1
