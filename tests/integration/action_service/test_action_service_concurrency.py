"""Concurrent requests on one key: exactly one effect, whatever the interleaving."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from aiohttp import ClientSession, TCPConnector
from aiohttp.test_utils import TestServer

from app.action_service.app import create_app
from app.action_service.ledger import count_alerts_async, count_effects_async, read_effects_async
from app.action_service.redis_keys import card_key

pytestmark = pytest.mark.integration


async def _post_all(url: str, requests: list[tuple[bytes, dict[str, str]]]) -> list[int]:
    async with ClientSession(connector=TCPConnector(limit=0)) as session:

        async def post(body: bytes, headers: dict[str, str]) -> int:
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                return response.status

        return list(await asyncio.gather(*(post(b, h) for b, h in requests)))


async def test_200_concurrent_identical_requests_apply_one_effect(client, redis, auth, new_action):
    act = new_action("freeze_card", "txn-burst", "card-burst")
    url = str(client.make_url("/v1/actions"))
    statuses = Counter(await _post_all(url, [(act.to_json(), auth(act.idempotency_key))] * 200))
    assert statuses[201] == 1
    assert set(statuses) <= {200, 201, 409}
    assert sum(statuses.values()) == 200
    entries = await read_effects_async(redis)
    assert [f["idempotency_key"] for _, f in entries] == [act.idempotency_key]


async def test_two_processes_worth_of_servers_on_one_redis_apply_one_effect(
    make_settings, redis, auth, new_action
):
    """Two apps (as two service replicas would) share Redis: the Lua script is the arbiter."""
    act = new_action("alert_customer", "txn-replicas", "card-replicas")
    servers = [TestServer(create_app(make_settings())) for _ in range(2)]
    for server in servers:
        await server.start_server()
    try:
        requests = [(act.to_json(), auth(act.idempotency_key))] * 50
        results = await asyncio.gather(
            *(_post_all(str(server.make_url("/v1/actions")), requests) for server in servers)
        )
    finally:
        for server in servers:
            await server.close()
    statuses = Counter(results[0] + results[1])
    assert statuses[201] == 1
    assert set(statuses) <= {200, 201, 409}
    assert await count_effects_async(redis) == 1


async def test_concurrent_different_payloads_on_one_key_one_wins(client, redis, auth, new_action):
    base = new_action("freeze_card", "txn-contested", "card-0")
    variants = [
        new_action("freeze_card", "txn-contested", f"card-{i}", ts_ms=base.ts_ms) for i in range(40)
    ]
    assert {v.idempotency_key for v in variants} == {base.idempotency_key}
    url = str(client.make_url("/v1/actions"))
    statuses = await _post_all(url, [(v.to_json(), auth(v.idempotency_key)) for v in variants])
    counted = Counter(statuses)
    assert counted[201] == 1
    assert set(counted) <= {201, 409, 422}
    winner = variants[statuses.index(201)]
    entries = await read_effects_async(redis)
    assert [f["card_id"] for _, f in entries] == [winner.card_id]
    frozen = [
        v.card_id for v in variants if await redis.hget(card_key(v.card_id), "status") == "frozen"
    ]
    assert frozen == [winner.card_id]


async def test_script_alone_arbitrates_250_concurrent_applies(make_settings, redis, new_action):
    """Below the per-process in-flight guard: concurrent script runs on one key, one winner."""
    from app.action_service.app import default_redis_client
    from app.action_service.store import ActionStore

    pooled = default_redis_client(make_settings(action_redis_max_connections=16))
    store = ActionStore(pooled, ttl_ms=86_400_000, margin_ms=3_600_000, alerts_per_card=10)
    same = new_action("alert_customer", "txn-lua", "card-lua")
    others = [
        new_action("alert_customer", "txn-lua", f"card-lua-{i}", ts_ms=same.ts_ms)
        for i in range(50)
    ]
    try:
        results = await asyncio.gather(*(store.apply(a) for a in [same] * 200 + others))
    finally:
        await pooled.aclose()
    verdicts = Counter(r.verdict for r in results)
    assert verdicts["created"] == 1
    winner = results[[r.verdict for r in results].index("created")]
    replays = [r for r in results if r.verdict == "replay"]
    assert {(r.outcome, r.applied_at_ms, r.effect_id) for r in replays} <= {
        (winner.outcome, winner.applied_at_ms, winner.effect_id)
    }
    assert verdicts["replay"] + verdicts["mismatch"] == 249
    assert await count_effects_async(redis) == 1
    assert await count_alerts_async(redis) == 1
