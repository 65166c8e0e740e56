"""Every refusal of the action service: 400, 401, 404, 409, 410, 413, 422, 503 (and 500 safety)."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.action_service.app import create_app
from app.action_service.ledger import count_effects_async
from app.action_service.redis_keys import action_keys, card_key, idem_key

pytestmark = pytest.mark.integration


async def test_missing_or_wrong_token_is_401_before_anything_else(client, redis, new_action):
    act = new_action()
    for headers in (
        {"Idempotency-Key": act.idempotency_key},
        {"Idempotency-Key": act.idempotency_key, "Authorization": "Bearer wrong"},
        {
            "Idempotency-Key": act.idempotency_key,
            "Authorization": "Basic aW50ZWdyYXRpb24tdGVzdC10b2tlbg==",
        },
        {},
    ):
        response = await client.post("/v1/actions", data=act.to_json(), headers=headers)
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await response.json())["field"] == "Authorization"
    for path in ("/v1/cards/card-1", f"/v1/actions/{act.idempotency_key}"):
        assert (await client.get(path)).status == 401
    assert await count_effects_async(redis) == 0


async def test_missing_idempotency_key_is_400(client, auth, new_action):
    response = await client.post("/v1/actions", data=new_action().to_json(), headers=auth())
    assert response.status == 400
    assert await response.json() == {
        "error": "the Idempotency-Key header is required",
        "field": "Idempotency-Key",
    }


@pytest.mark.parametrize("chunked", [False, True])
async def test_body_over_64_kib_is_413(client, redis, auth, new_action, chunked):
    act = new_action()
    padded = act.to_json()[:-1] + b', "pad": "' + b"x" * (64 * 1024) + b'"}'

    async def chunks():
        for i in range(0, len(padded), 8192):
            yield padded[i : i + 8192]

    data = chunks() if chunked else padded
    response = await client.post("/v1/actions", data=data, headers=auth(act.idempotency_key))
    assert response.status == 413
    assert "error" in await response.json()
    assert await count_effects_async(redis) == 0


async def test_body_of_exactly_64_kib_is_read_and_judged(client, auth, new_action):
    act = new_action()
    base = act.to_json()
    padded = base[:-1] + b" " * (64 * 1024 - len(base)) + b"}"
    assert len(padded) == 64 * 1024
    response = await client.post("/v1/actions", data=padded, headers=auth(act.idempotency_key))
    assert response.status == 201


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("card_id"), "card_id"),
        (lambda d: d.update(ts_ms="1700000000000"), "ts_ms"),
        (lambda d: d.update(ts_ms=1.5e12), "ts_ms"),
        (lambda d: d.update(score=True), "score"),
        (lambda d: d.update(type="block_card"), "type"),
        (lambda d: d.update(card_id="bad card"), "card_id"),
        (lambda d: d.update(decided_at_ms=12), "decided_at_ms"),
        (lambda d: d.update(model_version=""), "model_version"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d.update(idempotency_key="f" * 32), "idempotency_key"),
    ],
)
async def test_invalid_body_is_422_naming_the_field(client, redis, auth, new_action, mutate, field):
    act = new_action()
    body = act.to_dict()
    mutate(body)
    response = await client.post(
        "/v1/actions", data=orjson.dumps(body), headers=auth(act.idempotency_key)
    )
    assert response.status == 422
    payload = await response.json()
    assert payload["field"] == field
    assert field in payload["error"]
    assert await count_effects_async(redis) == 0


@pytest.mark.parametrize("raw", [b"", b"{not json", b"[1, 2]", b"null"])
async def test_unparseable_body_is_422(client, auth, new_action, raw):
    response = await client.post(
        "/v1/actions", data=raw, headers=auth(new_action().idempotency_key)
    )
    assert response.status == 422
    assert (await response.json())["field"] is None


async def test_decided_far_in_the_future_is_422_and_applies_nothing(
    client, redis, auth, new_action
):
    act = new_action(decided_at_ms=int(time.time() * 1000) + 2 * 3_600_000)
    response = await client.post(
        "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
    )
    assert response.status == 422
    assert (await response.json())["field"] == "decided_at_ms"
    assert await redis.exists(idem_key(act.idempotency_key, act.card_id)) == 0


async def test_invalid_path_parameters_are_422_and_unknown_routes_404(client, auth):
    card = await client.get("/v1/cards/bad%20card", headers=auth())
    assert card.status == 422
    assert (await card.json())["field"] == "card_id"
    record = await client.get("/v1/actions/NOT-A-KEY", headers=auth())
    assert record.status == 422
    unknown = await client.get("/v2/nothing")
    assert unknown.status == 404
    assert "error" in await unknown.json()
    wrong_method = await client.delete("/v1/actions")
    assert wrong_method.status == 405
    assert "POST" in wrong_method.headers["Allow"]


async def test_redis_unreachable_is_503_with_retry_after(
    make_settings, auth, new_action, unused_tcp_port
):
    settings = make_settings(
        redis_url=f"redis://127.0.0.1:{unused_tcp_port}/3", action_redis_timeout_s=0.5
    )
    async with TestClient(TestServer(create_app(settings))) as down:
        act = new_action()
        started = time.monotonic()
        for method, path, kwargs in (
            ("POST", "/v1/actions", {"data": act.to_json(), "headers": auth(act.idempotency_key)}),
            ("GET", "/v1/cards/card-1", {"headers": auth()}),
            ("GET", f"/v1/actions/{act.idempotency_key}", {"headers": auth()}),
            ("GET", "/readyz", {}),
        ):
            response = await down.request(method, path, **kwargs)
            assert response.status == 503, path
            assert response.headers["Retry-After"] == "1"
        assert time.monotonic() - started < 10
        assert (await down.get("/healthz")).status == 200
        metrics = await (await down.get("/metrics")).text()
        assert "action_service_redis_unavailable_total 3.0" in metrics


async def test_a_failing_script_writes_nothing(client, redis, auth, new_action):
    """Checks run before the first write: a refused script leaves no key and no effect."""
    act = new_action("freeze_card", "txn-x", "card-x")
    effects_shard = action_keys(act.idempotency_key, act.card_id)[3]  # card-x's ledger shard
    await redis.set(effects_shard, "not a stream")
    response = await client.post(
        "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
    )
    assert response.status == 500
    assert await redis.exists(idem_key(act.idempotency_key, act.card_id)) == 0
    assert await redis.exists(card_key("card-x")) == 0
    await redis.delete(effects_shard)
    retried = await client.post(
        "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
    )
    assert retried.status == 201


async def test_same_key_in_flight_in_this_process_is_409(client, redis, auth, new_action):
    """While this process handles a key, a second request for it gets 409 (retryable)."""
    from app.action_service.appkeys import IN_FLIGHT

    act = new_action()
    in_flight = client.server.app[IN_FLIGHT]
    in_flight.add(act.idempotency_key)  # as if a request for it were awaiting Redis right now
    try:
        response = await client.post(
            "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
        )
    finally:
        in_flight.discard(act.idempotency_key)
    assert response.status == 409
    assert (await response.json())["field"] == "idempotency_key"
    assert await count_effects_async(redis) == 0
    retried = await client.post(
        "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
    )
    assert retried.status == 201
    await asyncio.sleep(0)


async def test_wait_for_a_missing_replica_is_503_and_the_retry_replays(
    make_settings, redis, auth, new_action
):
    """A single Redis has no replica: asking WAIT for one answers 503 (the script ran); the
    retry of the same key, by a service that does not wait, is answered from the record."""
    act = new_action("freeze_card", "txn-wait", "card-wait")
    waiting = create_app(make_settings(redis_wait_replicas=1, redis_wait_timeout_ms=50))
    async with TestClient(TestServer(waiting)) as strict:
        response = await strict.post(
            "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
        )
        assert response.status == 503
        assert response.headers["Retry-After"] == "1"
        assert "0 of 1 required Redis replicas" in (await response.json())["error"]
    async with TestClient(TestServer(create_app(make_settings()))) as relaxed:
        retried = await relaxed.post(
            "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
        )
        assert retried.status == 200
        assert retried.headers["Idempotent-Replayed"] == "true"
    assert await count_effects_async(redis) == 1
