"""The fraud team's loop on the real stack: replay → freeze → release → card active; the same
freeze delivered again → 200 replayed, card stays active; a later freeze → frozen again;
confirm → a label on `labels`; a read-only token → 403 on both routes."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import orjson
import pytest

from app.action_service.ledger import count_replays
from app.action_service.redis_keys import analyst_label_id
from app.actions import Action, make_action
from app.harness.pipeline import (
    effects,
    lines_of,
    make_log,
    produce,
    read,
    replay_and_settle,
    with_own_service,
)
from app.harness.procs import wait_until
from app.kafka import topics
from app.redis_url import sync_client
from app.settings import Settings
from app.transactions.labels import LabelRecord
from tests.support.live import (
    READ,
    StartActionService,
    StartWorker,
    api_request,
    with_analysts,
)

pytestmark = pytest.mark.integration

_call = partial(api_request, timeout_s=10)


def _card(settings: Settings, card_id: str) -> dict[str, Any]:
    status, _, body = _call(settings, "GET", f"/v1/cards/{card_id}", token=READ)
    assert status == 200
    return body


def test_release_confirm_and_labels_end_to_end(fresh_settings: Settings,
                                               start_action_service: StartActionService,
                                               start_worker: StartWorker) -> None:
    settings = with_analysts(with_own_service(fresh_settings, redis_db=6))
    log = make_log(cards=300, txns=6000, seed=31)
    lines = lines_of(log)
    service = start_action_service(settings)
    worker = start_worker(settings)
    replay_and_settle(settings, [worker], lines)

    # replay → freeze: pick a card the pipeline froze
    frozen = [e for e in effects(settings.effective_redis_url)
              if e["type"] == "freeze_card" and e["outcome"] == "frozen"]
    assert frozen, "the demo model froze no card in this log"
    card_id = frozen[0]["card_id"]
    freeze = next(Action.from_json(r.value) for r in read(settings, topics.ACTIONS)
                  if orjson.loads(r.value)["idempotency_key"] == frozen[0]["idempotency_key"])
    assert _card(settings, card_id)["status"] == "frozen"

    # a read-only token may look, not decide: 403 on both routes, nothing written
    for route in ("release", "confirm"):
        status, _, body = _call(settings, "POST", f"/v1/cards/{card_id}/{route}",
                                token=READ, key=f"ro-{route}", body={"reason": "x"})
        assert (status, body["field"]) == (403, "Authorization")
    assert _card(settings, card_id)["status"] == "frozen"

    # release → active, recorded with alice's name
    status, _, released = _call(settings, "POST", f"/v1/cards/{card_id}/release",
                                key="rel-1", body={"reason": "customer confirmed"})
    assert status == 201 and released["outcome"] == "released"
    assert released["by"] == "alice" and released["txn_id"] == freeze.txn_id
    card = _card(settings, card_id)
    assert card["status"] == "active" and card["released_by"] == "alice"

    # the same freeze delivered again (through the dispatcher) → replayed, stays active
    replays_before = _replays(settings)
    produce(settings, topics.ACTIONS, [(card_id.encode(), freeze.to_json())])
    wait_until(lambda: _replays(settings) > replays_before, timeout_s=60,
               what="the dispatcher to deliver the freeze again")
    status, headers, _ = _call(settings, "POST", "/v1/actions", key=freeze.idempotency_key,
                               body=orjson.loads(freeze.to_json()))
    assert status == 200 and headers["Idempotent-Replayed"] == "true"
    assert _card(settings, card_id)["status"] == "active"

    # a later freeze decision → frozen again
    now = time.time_ns() // 1_000_000
    later = make_action("freeze_card", card_id=card_id, txn_id=f"{freeze.txn_id}-later",
                        ts_ms=now - 1000, score=0.99, model_version=freeze.model_version,
                        decided_at_ms=now)
    produce(settings, topics.ACTIONS, [(card_id.encode(), later.to_json())])
    wait_until(lambda: _card(settings, card_id)["status"] == "frozen", timeout_s=60,
               what="the later freeze to apply")
    assert [e["event"] for e in _card(settings, card_id)["history"]][-3:] == [
        "frozen", "released", "frozen"]

    # confirm → a label on the labels topic (through the service's outbox forwarder)
    status, _, confirmed = _call(settings, "POST", f"/v1/cards/{card_id}/confirm",
                                 key="conf-1", body={"reason": "chargeback"})
    assert status == 201 and confirmed["txn_id"] == later.txn_id
    wait_until(lambda: len(_labels(settings, card_id)) == 2, timeout_s=60,
               what="both analyst labels on the labels topic")
    worker.stop()
    service.stop()
    labels = sorted(_labels(settings, card_id), key=lambda x: x.reported_at_ms)
    assert [(x.txn_id, x.label, x.source, x.by) for x in labels] == [
        (freeze.txn_id, 0, "analyst_release", "alice"),
        (later.txn_id, 1, "analyst_confirm", "alice")]
    assert [x.label_id for x in labels] == [analyst_label_id(card_id, released["effect_id"]),
                                            analyst_label_id(card_id, confirmed["effect_id"])]
    # exactly once: one ledger entry per key, the redelivered freeze none
    keys = [e["idempotency_key"] for e in effects(settings.effective_redis_url)
            if e["card_id"] == card_id]
    assert keys.count(freeze.idempotency_key) == 1 and len(keys) == len(set(keys))


def _replays(settings: Settings) -> int:
    """Redeliveries the action service absorbed (200 replayed), from its durable counters."""
    client = sync_client(settings.effective_redis_url, decode_responses=True)
    try:
        return count_replays(client)
    finally:
        client.close()


def _labels(settings: Settings, card_id: str) -> list[LabelRecord]:
    return [x for x in (LabelRecord.from_json(r.value) for r in read(settings, topics.LABELS))
            if x.card_id == card_id]
