"""The POST/GET contract of the action service against a real Redis."""

from __future__ import annotations

import pytest

from app.action_service.ledger import (
    count_alerts_async,
    count_effects_async,
    read_alerts_async,
    read_effects_async,
)
from app.action_service.redis_keys import card_key, idem_key
from tests.support.cards import unknown_card_view

pytestmark = pytest.mark.integration


async def test_new_key_applies_once_and_replays_answer_from_the_record(
    client, redis, auth, new_action
):
    act = new_action("freeze_card", "txn-a", "card-a")
    first = await client.post("/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key))
    assert first.status == 201
    body = await first.json()
    assert body["outcome"] == "frozen"
    assert body["idempotency_key"] == act.idempotency_key
    assert first.headers["Location"] == f"/v1/actions/{act.idempotency_key}"
    assert "Idempotent-Replayed" not in first.headers

    again = await client.post("/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key))
    assert again.status == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == body

    entries = await read_effects_async(redis)
    assert len(entries) == 1
    effect_id, fields = entries[0]
    assert effect_id == body["effect_id"]
    assert fields["idempotency_key"] == act.idempotency_key
    assert fields["type"] == "freeze_card"
    assert fields["card_id"] == "card-a"
    assert fields["txn_id"] == "txn-a"
    assert int(fields["applied_at_ms"]) == body["applied_at_ms"]
    card = await redis.hgetall(card_key("card-a"))
    assert card["status"] == "frozen"
    assert card["txn_id"] == "txn-a"
    ttl_ms = await redis.pttl(idem_key(act.idempotency_key, act.card_id))
    assert 86_000_000 < ttl_ms <= 86_400_000


async def test_replay_under_new_model_version_and_later_decision_is_the_same_action(
    client, redis, auth, new_action
):
    act = new_action("alert_customer", "txn-b", "card-b", model_version="m-1", score=0.7)
    later = new_action(
        "alert_customer",
        "txn-b",
        "card-b",
        ts_ms=act.ts_ms,
        model_version="m-2",
        score=0.2,
        decided_at_ms=act.decided_at_ms + 60_000,
    )
    assert later.idempotency_key == act.idempotency_key
    first = await client.post("/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key))
    second = await client.post(
        "/v1/actions", data=later.to_json(), headers=auth(act.idempotency_key)
    )
    assert (first.status, second.status) == (201, 200)
    assert await second.json() == await first.json()
    assert await count_effects_async(redis) == 1
    assert await count_alerts_async(redis) == 1


async def test_same_key_with_another_card_or_ts_is_422_and_applies_nothing(
    client, redis, auth, new_action
):
    act = new_action("freeze_card", "txn-c", "card-c")
    assert (
        await client.post("/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key))
    ).status == 201
    for other in (
        new_action("freeze_card", "txn-c", "card-other", ts_ms=act.ts_ms),
        new_action("freeze_card", "txn-c", "card-c", ts_ms=act.ts_ms + 1),
    ):
        response = await client.post(
            "/v1/actions", data=other.to_json(), headers=auth(other.idempotency_key)
        )
        assert response.status == 422
        assert (await response.json())["field"] == "idempotency_key"
    assert await count_effects_async(redis) == 1
    assert await redis.exists(card_key("card-other")) == 0


async def test_freezing_a_frozen_card_records_the_key_and_keeps_the_first_freeze(
    client, redis, auth, new_action
):
    first = new_action("freeze_card", "txn-d1", "card-d")
    second = new_action("freeze_card", "txn-d2", "card-d")
    r1 = await client.post("/v1/actions", data=first.to_json(), headers=auth(first.idempotency_key))
    r2 = await client.post(
        "/v1/actions", data=second.to_json(), headers=auth(second.idempotency_key)
    )
    assert (r1.status, r2.status) == (201, 201)
    assert (await r1.json())["outcome"] == "frozen"
    assert (await r2.json())["outcome"] == "already_frozen"
    card = await (await client.get("/v1/cards/card-d", headers=auth())).json()
    assert card["status"] == "frozen"
    assert card["txn_id"] == "txn-d1"
    assert card["frozen_at_ms"] == (await r1.json())["applied_at_ms"]
    # invariant: exactly one effects entry per key answered 201, no-op freezes included
    effects = await read_effects_async(redis)
    assert [f["outcome"] for _, f in effects] == ["frozen", "already_frozen"]
    assert {f["idempotency_key"] for _, f in effects} == {
        first.idempotency_key,
        second.idempotency_key,
    }


async def test_alerts_are_queued_and_listed_on_the_card(client, redis, auth, new_action):
    acts = [
        new_action("alert_customer", f"txn-e{i}", "card-e", score=0.5 + i / 10) for i in range(3)
    ]
    for act in acts:
        response = await client.post(
            "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
        )
        assert response.status == 201
        assert (await response.json())["outcome"] == "alert_queued"
    queued = await read_alerts_async(redis)
    assert [f["txn_id"] for _, f in queued] == ["txn-e0", "txn-e1", "txn-e2"]
    card = await (await client.get("/v1/cards/card-e", headers=auth())).json()
    assert card["status"] == "active"
    assert card["frozen_at_ms"] is None and card["reason"] is None and card["txn_id"] is None
    assert card["alerts_total"] == 3
    assert [a["txn_id"] for a in card["alerts"]] == ["txn-e0", "txn-e1", "txn-e2"]
    assert [a["score"] for a in card["alerts"]] == [0.5, 0.6, 0.7]
    assert [a["alert_id"] for a in card["alerts"]] == [i for i, _ in queued]


async def test_alert_list_per_card_is_bounded(make_settings, redis, auth, new_action):
    from aiohttp.test_utils import TestClient, TestServer

    from app.action_service.app import create_app

    app = create_app(make_settings(action_alerts_per_card=2))
    async with TestClient(TestServer(app)) as small:
        for i in range(4):
            act = new_action("alert_customer", f"txn-f{i}", "card-f")
            assert (
                await small.post(
                    "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
                )
            ).status == 201
        card = await (await small.get("/v1/cards/card-f", headers=auth())).json()
    assert [a["txn_id"] for a in card["alerts"]] == ["txn-f2", "txn-f3"]
    assert card["alerts_total"] == 4
    assert await count_alerts_async(redis) == 4


async def test_unknown_card_is_active_without_alerts(client, auth):
    response = await client.get("/v1/cards/never-seen", headers=auth())
    assert response.status == 200
    assert await response.json() == unknown_card_view("never-seen")


async def test_get_action_returns_the_stored_record_or_404(client, auth, new_action):
    act = new_action("freeze_card", "txn-g", "card-g", score=0.91, model_version="m-7")
    created = await client.post(
        "/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key)
    )
    record = await (await client.get(f"/v1/actions/{act.idempotency_key}", headers=auth())).json()
    assert record["result"] == await created.json()
    assert record["status"] == 201
    assert record["score"] == 0.91
    assert record["model_version"] == "m-7"
    assert record["decided_at_ms"] == act.decided_at_ms
    assert 0 < record["expires_in_ms"] <= 86_400_000
    missing = await client.get("/v1/actions/" + "0" * 32, headers=auth())
    assert missing.status == 404
    assert (await missing.json())["field"] is None


async def test_header_key_must_equal_body_key(client, redis, auth, new_action):
    act = new_action("freeze_card", "txn-h", "card-h")
    other = new_action("freeze_card", "txn-h2", "card-h")
    response = await client.post(
        "/v1/actions", data=act.to_json(), headers=auth(other.idempotency_key)
    )
    assert response.status == 422
    assert (await response.json())["field"] == "idempotency_key"
    assert await count_effects_async(redis) == 0


async def test_health_readiness_metrics_and_openapi(client, auth, new_action):
    assert (await (await client.get("/healthz")).json()) == {"status": "ok"}
    assert (await (await client.get("/readyz")).json()) == {"status": "ready"}
    act = new_action()
    await client.post("/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key))
    await client.post("/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key))
    text = await (await client.get("/metrics")).text()
    assert (
        'action_service_requests_total{method="POST",route="/v1/actions",status="201"} 1.0' in text
    )
    assert (
        'action_service_requests_total{method="POST",route="/v1/actions",status="200"} 1.0' in text
    )
    assert 'action_service_effects_applied_total{outcome="frozen",type="freeze_card"} 1.0' in text
    assert 'action_service_replays_absorbed_total{type="freeze_card"} 1.0' in text
    assert "action_service_request_duration_seconds_bucket" in text
    spec = await (await client.get("/openapi.json")).json()
    assert spec["openapi"].startswith("3.")
