"""The label outbox on a real Redis: decisions' labels reach the sender once acknowledged,
a failed send is retried, entries of a consumer that went away are claimed by another."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.action_service.app import create_app
from app.action_service.label_outbox import GROUP, LabelForwarder
from app.action_service.redis_keys import LABEL_STREAMS
from app.settings import Settings
from app.transactions.labels import LabelRecord

pytestmark = pytest.mark.integration


@pytest.fixture
async def service(make_settings: Callable[..., Settings]) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(create_app(make_settings()))) as test_client:
        yield test_client


async def _decide(client: TestClient, auth, card: str, route: str, key: str) -> None:  # noqa: ANN001
    response = await client.post(f"/v1/cards/{card}/{route}", data=b'{"reason": "r"}',
                                 headers=auth(key))
    assert response.status == 201, await response.text()


async def _outbox_len(redis) -> int:  # noqa: ANN001
    return sum([await redis.xlen(s) for s in LABEL_STREAMS])


async def test_labels_are_forwarded_after_the_send_succeeds(service, redis, auth, new_action):
    for card in ("card-1", "card-2", "card-3"):
        act = new_action("freeze_card", f"txn-{card}", card)
        await service.post("/v1/actions", data=act.to_json(), headers=auth(act.idempotency_key))
        await _decide(service, auth, card, "release", f"r-{card}")
    await _decide(service, auth, "card-1", "confirm", "c-1")

    failing = True
    sent: list[LabelRecord] = []

    async def send(record: LabelRecord) -> None:
        if failing:
            raise RuntimeError("kafka down")
        sent.append(record)

    forwarder = LabelForwarder(redis, send, consumer="a")
    with pytest.raises(RuntimeError):
        await forwarder.forward_once()
    assert sent == [] and await _outbox_len(redis) == 4  # nothing acknowledged, nothing lost
    failing = False
    moved = 0
    for _ in range(20):  # bounded: each pass moves at least one shard's entries
        step = await forwarder.forward_once()
        moved += step
        if not step:
            break
    assert moved == 4 and await _outbox_len(redis) == 0
    assert sorted((r.txn_id, r.label, r.source) for r in sent) == [
        ("txn-card-1", 0, "analyst_release"), ("txn-card-1", 1, "analyst_confirm"),
        ("txn-card-2", 0, "analyst_release"), ("txn-card-3", 0, "analyst_release")]
    assert len({r.label_id for r in sent}) == 4
    assert all(r.card_id and r.by for r in sent)
    assert await forwarder.forward_once() == 0


async def test_entries_of_a_consumer_that_went_away_are_claimed(service, redis, auth):
    await _decide(service, auth, "card-9", "confirm", "c-9")

    async def lost(record: LabelRecord) -> None:
        raise RuntimeError("the process dies before the ack")

    with pytest.raises(RuntimeError):
        await LabelForwarder(redis, lost, consumer="dead").forward_once()
    sent: list[LabelRecord] = []

    async def send(record: LabelRecord) -> None:
        sent.append(record)

    live = LabelForwarder(redis, send, consumer="live", claim_idle_ms=0)
    assert await live.forward_once() == 0  # the entry is pending on "dead", not new
    assert await live.claim_abandoned() == 1
    assert await live.forward_once() == 1
    assert [(r.card_id, r.label) for r in sent] == [("card-9", 1)]
    groups = {s: await redis.xpending(s, GROUP) for s in LABEL_STREAMS}
    assert all(g["pending"] == 0 for g in groups.values())
