"""Analyst decisions (release, confirm) against a real Redis: once per key, with the ledger entry,
the label outbox entry and the card's history, by the token's name; old freezes stay absorbed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.action_service.app import create_app
from app.action_service.ledger import read_effects_async
from app.action_service.redis_keys import (
    LABEL_STREAMS,
    analyst_label_id,
    decision_keys,
    shard_of,
)
from app.actions.key import idempotency_key
from app.settings import Settings

pytestmark = pytest.mark.integration

WRITE = "tok-alice"
READ = "tok-reader"


@pytest.fixture
async def named_client(make_settings: Callable[..., Settings]) -> AsyncIterator[TestClient]:
    settings = make_settings(action_token=f"alice:{WRITE},tok-unnamed", action_read_token=READ)
    async with TestClient(TestServer(create_app(settings))) as test_client:
        yield test_client


def _h(key: str | None = "k-1", token: str = WRITE) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


async def _freeze(client: TestClient, action) -> int:  # noqa: ANN001 - an Action
    response = await client.post("/v1/actions", data=action.to_json(),
                                 headers=_h(action.idempotency_key))
    return response.status


async def _labels(redis, card_id: str) -> list[dict[str, str]]:  # noqa: ANN001
    return [fields for _, fields in await redis.xrange(LABEL_STREAMS[shard_of(card_id)])]


async def test_release_unfreezes_once_and_an_old_freeze_delivered_again_stays_absorbed(
        named_client, redis, new_action):
    freeze = new_action("freeze_card", "txn-1", "card-r")
    assert await _freeze(named_client, freeze) == 201

    body = b'{"reason": "customer called, travelling"}'
    first = await named_client.post("/v1/cards/card-r/release", data=body, headers=_h("rel-1"))
    assert first.status == 201, await first.text()
    result = await first.json()
    assert result["outcome"] == "released" and result["by"] == "alice"
    assert result["txn_id"] == "txn-1" and result["reason"] == "customer called, travelling"
    again = await named_client.post("/v1/cards/card-r/release", data=body, headers=_h("rel-1"))
    assert again.status == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == result

    card = await (await named_client.get("/v1/cards/card-r", headers=_h(None, READ))).json()
    assert card["status"] == "active" and card["released_by"] == "alice"
    assert card["released_at_ms"] == result["applied_at_ms"]
    assert [(e["event"], e["by"]) for e in card["history"]] == [
        ("frozen", "model m-1"), ("released", "alice")]

    # the same freeze delivered again: absorbed as a replay, the card stays released
    assert await _freeze(named_client, freeze) == 200
    # a freeze decided before the release but delivered (first) after it: absorbed too
    late = new_action("freeze_card", "txn-2", "card-r", decided_at_ms=result["applied_at_ms"] - 5)
    response = await named_client.post("/v1/actions", data=late.to_json(),
                                       headers=_h(late.idempotency_key))
    assert response.status == 201
    assert (await response.json())["outcome"] == "superseded_by_release"
    card = await (await named_client.get("/v1/cards/card-r", headers=_h(None))).json()
    assert card["status"] == "active"

    # a new freeze decision after the release freezes it again
    later = new_action("freeze_card", "txn-3", "card-r", decided_at_ms=result["applied_at_ms"] + 1)
    assert await _freeze(named_client, later) == 201
    card = await (await named_client.get("/v1/cards/card-r", headers=_h(None))).json()
    assert card["status"] == "frozen" and card["txn_id"] == "txn-3"
    assert [e["event"] for e in card["history"]] == ["frozen", "released", "frozen"]

    # one ledger entry per effect, the release's by name; one label: the freeze was wrong
    ledger = [f for _, f in await read_effects_async(redis) if f["card_id"] == "card-r"]
    assert [(f["type"], f["outcome"]) for f in ledger] == [
        ("freeze_card", "frozen"), ("release_card", "released"),
        ("freeze_card", "superseded_by_release"), ("freeze_card", "frozen")]
    assert ledger[1]["by"] == "alice"
    labels = await _labels(redis, "card-r")
    assert [(x["txn_id"], x["label"], x["source"], x["label_id"]) for x in labels] == [
        ("txn-1", "0", "analyst_release", analyst_label_id("card-r", result["effect_id"]))]


async def test_confirm_labels_fraud_and_unnamed_tokens_get_a_derived_name(named_client, redis,
                                                                          new_action):
    assert await _freeze(named_client, new_action("freeze_card", "txn-9", "card-c")) == 201
    response = await named_client.post("/v1/cards/card-c/confirm", headers=_h("c-1", "tok-unnamed"),
                                       data=b'{"reason": "chargeback 1234"}')
    assert response.status == 201
    result = await response.json()
    assert result["outcome"] == "confirmed" and result["txn_id"] == "txn-9"
    assert result["by"].startswith("token-") and "tok-unnamed" not in result["by"]
    card = await (await named_client.get("/v1/cards/card-c", headers=_h(None))).json()
    assert card["status"] == "frozen" and card["confirmed_fraud"] is True
    assert card["history"][-1]["event"] == "confirmed"
    named = await named_client.post("/v1/cards/card-c/confirm", headers=_h("c-2"),
                                    data=b'{"reason": "second txn", "txn_id": "txn-8"}')
    assert (await named.json())["txn_id"] == "txn-8"
    labels = await _labels(redis, "card-c")
    assert [(x["txn_id"], x["label"], x["source"]) for x in labels] == [
        ("txn-9", "1", "analyst_confirm"), ("txn-8", "1", "analyst_confirm")]


async def test_release_of_an_active_card_is_recorded_and_changes_nothing(named_client, redis):
    response = await named_client.post("/v1/cards/card-n/release", headers=_h("n-1"),
                                       data=b'{"reason": "just in case"}')
    assert response.status == 201 and (await response.json())["outcome"] == "not_frozen"
    assert await _labels(redis, "card-n") == []
    card = await (await named_client.get("/v1/cards/card-n", headers=_h(None))).json()
    assert card["history"] == [] and card["status"] == "active"


@pytest.mark.parametrize("route", ["release", "confirm"])
async def test_read_only_and_missing_tokens_are_refused_and_write_nothing(named_client, redis,
                                                                         route):
    body = b'{"reason": "x"}'
    response = await named_client.post(f"/v1/cards/card-x/{route}", data=body,
                                       headers=_h("k", READ))
    assert response.status == 403
    response = await named_client.post(f"/v1/cards/card-x/{route}", data=body,
                                       headers=_h("k", "nope"))
    assert response.status == 401
    assert await redis.keys("*") == []


@pytest.mark.parametrize(("route", "key", "body", "status", "field"), [
    ("release", None, b'{"reason": "x"}', 400, "Idempotency-Key"),
    ("release", "bad key!", b'{"reason": "x"}', 422, "Idempotency-Key"),
    ("release", "k", b'{}', 422, "reason"),
    ("release", "k", b'{"reason": ""}', 422, "reason"),
    ("release", "k", b'{"reason": 5}', 422, "reason"),
    ("release", "k", b'{"reason": "x", "txn_id": "t"}', 422, "txn_id"),
    ("confirm", "k", b'{"reason": "x", "txn_id": "bad id"}', 422, "txn_id"),
    ("confirm", "k", b'{"reason": "x", "colour": 1}', 422, "colour"),
    ("confirm", "k", b'not json', 422, None),
    ("confirm", "k", b'[1]', 422, None),
])
async def test_bad_input_names_the_field_and_writes_nothing(named_client, redis, route, key, body,
                                                            status, field):
    response = await named_client.post(f"/v1/cards/card-b/{route}", data=body, headers=_h(key))
    assert response.status == status
    assert (await response.json())["field"] == field
    assert await redis.keys("*") == []


async def test_a_key_reused_with_another_decision_or_reason_is_422(named_client, redis):
    first = await named_client.post("/v1/cards/card-m/confirm", headers=_h("m-1"),
                                    data=b'{"reason": "a"}')
    assert first.status == 201
    for route, body in (("confirm", b'{"reason": "b"}'), ("release", b'{"reason": "a"}')):
        response = await named_client.post(f"/v1/cards/card-m/{route}", data=body,
                                           headers=_h("m-1"))
        assert response.status == 422
        assert (await response.json())["field"] == "Idempotency-Key"
    # the same key on another card is another decision
    other = await named_client.post("/v1/cards/card-o/confirm", headers=_h("m-1"),
                                    data=b'{"reason": "a"}')
    assert other.status == 201
    record = await redis.hgetall(decision_keys("m-1", "card-m")[0])
    assert record["reason"] == "a" and record["by"] == "alice"
    assert 86_000_000 < await redis.pttl(decision_keys("m-1", "card-m")[0]) <= 86_400_000


async def test_the_explanation_is_stored_with_the_effect(named_client, redis, new_action):
    from app.actions import make_action
    from app.actions.explanation import Contribution

    plain = new_action("freeze_card", "txn-e", "card-e")
    explained = make_action(
        "freeze_card", card_id="card-e", txn_id="txn-e", ts_ms=plain.ts_ms, score=plain.score,
        model_version="m-1", decided_at_ms=plain.decided_at_ms,
        explanation=(Contribution("sum_24h", 120_000, 0.25), Contribution("count_1h", 7, 0.125),
                     Contribution("mean_1h", 17142.857, -0.0625)))
    assert await _freeze(named_client, explained) == 201
    # the same action without an explanation (an older worker) is a replay, not a conflict
    assert await _freeze(named_client, plain) == 200
    expected = [{"name": "sum_24h", "value": 120_000, "contribution": 0.25},
                {"name": "count_1h", "value": 7, "contribution": 0.125},
                {"name": "mean_1h", "value": 17142.857, "contribution": -0.0625}]
    record = await (await named_client.get(f"/v1/actions/{explained.idempotency_key}",
                                           headers=_h(None, READ))).json()
    assert record["explanation"] == expected
    card = await (await named_client.get("/v1/cards/card-e", headers=_h(None, READ))).json()
    assert card["explanation"] == expected
    alert = make_action("alert_customer", card_id="card-e", txn_id="txn-e", ts_ms=plain.ts_ms,
                        score=plain.score, model_version="m-1",
                        decided_at_ms=plain.decided_at_ms, explanation=explained.explanation)
    assert await _freeze(named_client, alert) == 201
    card = await (await named_client.get("/v1/cards/card-e", headers=_h(None, READ))).json()
    assert card["alerts"][0]["explanation"] == expected
    # a bad explanation is a 422 naming the field, and writes nothing
    bad = orjson.loads(explained.to_json())
    bad["txn_id"], bad["idempotency_key"] = "txn-f", idempotency_key("freeze_card", "txn-f")
    bad["explanation"] = [{"name": "x", "value": "high", "contribution": 1}]
    response = await named_client.post("/v1/actions", data=orjson.dumps(bad),
                                       headers=_h(bad["idempotency_key"]))
    assert response.status == 422 and (await response.json())["field"] == "explanation"


async def test_who_decided_is_stored_with_the_effect(named_client, redis, new_action):
    from app.actions import make_action

    plain = new_action("freeze_card", "txn-b", "card-b")
    blocked = make_action("freeze_card", card_id="card-b", txn_id="txn-b", ts_ms=plain.ts_ms,
                          score=0.01, model_version="m-1", decided_at_ms=plain.decided_at_ms,
                          decided_by="block_list", rule="block:card:card-b")
    assert await _freeze(named_client, blocked) == 201
    # the same transaction decided by the model after the entry was removed: a replay
    assert await _freeze(named_client, plain) == 200
    record = await (await named_client.get(f"/v1/actions/{blocked.idempotency_key}",
                                           headers=_h(None, READ))).json()
    assert (record["decided_by"], record["rule"]) == ("block_list", "block:card:card-b")
    card = await (await named_client.get("/v1/cards/card-b", headers=_h(None, READ))).json()
    assert (card["decided_by"], card["rule"]) == ("block_list", "block:card:card-b")
    assert card["history"][-1]["by"] == "block_list block:card:card-b"
    assert card["reason"].startswith("freeze_card by block_list block:card:card-b")
    allowed = make_action("alert_customer", card_id="card-b", txn_id="txn-a", ts_ms=plain.ts_ms,
                          score=0.99, model_version="m-1", decided_at_ms=plain.decided_at_ms,
                          decided_by="allow_list", rule="allow:merchant:m-7")
    assert await _freeze(named_client, allowed) == 201
    card = await (await named_client.get("/v1/cards/card-b", headers=_h(None, READ))).json()
    assert (card["alerts"][0]["decided_by"], card["alerts"][0]["rule"]) == (
        "allow_list", "allow:merchant:m-7")
    # a decider without its rule is a 422 naming the field, and writes nothing
    bad = orjson.loads(new_action("freeze_card", "txn-c", "card-c").to_json())
    bad["decided_by"] = "block_list"
    response = await named_client.post("/v1/actions", data=orjson.dumps(bad),
                                       headers=_h(bad["idempotency_key"]))
    assert response.status == 422 and (await response.json())["field"] == "rule"
    card = await (await named_client.get("/v1/cards/card-c", headers=_h(None, READ))).json()
    assert card["status"] == "active"
