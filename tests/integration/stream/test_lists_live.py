"""Allow/block lists on the real stack: managed through the action service (4xx naming the field,
403 for a read-only token, nothing written on a refusal), carried to the worker by the control
topic, applied to every decision (block freezes, allow downgrades a freeze to an alert and says
so), exactly as the offline oracle with the same lists decides."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from app.harness.pipeline import (
    lines_of,
    make_log,
    produce,
    read,
    replay,
    replay_and_settle,
    require_compiled_fold,
    wait_dispatched,
    wait_drained,
    with_own_service,
)
from app.harness.procs import wait_until
from app.kafka import topics
from app.scoring.lists import ListEntry, Lists
from app.settings import Settings
from tests.support.live import (
    READ,
    StartActionService,
    StartWorker,
    api_call,
    metric_values,
    offline_run,
    with_analysts,
)

pytestmark = pytest.mark.integration

def _applied(port: int) -> dict[str, float]:
    """The worker's fraudstream_list_entries gauge, by list."""
    return metric_values(port, r'^fraudstream_list_entries\{list="(\w+)"\} (\S+)$')


def test_lists_reach_the_worker_and_decide_as_the_oracle_does(
        fresh_settings: Settings, start_action_service: StartActionService,
        start_worker: StartWorker) -> None:
    require_compiled_fold()
    settings = with_analysts(with_own_service(fresh_settings, redis_db=10))
    log = make_log(cards=300, txns=6000, seed=31)
    lines = lines_of(log)
    now_ms = time.time_ns() // 1_000_000
    plain = offline_run(settings, lines, now_ms=now_ms, extra=("merchant_id",))
    frozen_cards = list(dict.fromkeys(a.card_id for a in plain.actions
                                      if a.type == "freeze_card"))
    assert len(frozen_cards) >= 2, "the demo model froze too few cards in this log"
    acted = {a.card_id for a in plain.actions}
    quiet = next(c for c in plain.offline.table.column("card_id").to_pylist() if c not in acted)
    allowed_card = frozen_cards[0]
    # the merchant of another frozen card's first freeze: allowed for every card there
    table = plain.offline.table
    first_freeze = next(a for a in plain.actions if a.type == "freeze_card"
                        and a.card_id == frozen_cards[1])
    row = table.column("txn_id").to_pylist().index(first_freeze.txn_id)
    allowed_merchant = table.column("merchant_id")[row].as_py()

    start_action_service(settings)
    worker = start_worker(settings)
    # refusals name the field and write nothing
    refused = [
        api_call(settings, "PUT", f"/v1/lists/card/{quiet}", token=READ,
                 body={"list": "block", "reason": "mule"}),
        api_call(settings, "PUT", f"/v1/lists/person/{quiet}",
                 body={"list": "block", "reason": "mule"}),
        api_call(settings, "PUT", f"/v1/lists/card/{quiet}", body={"list": "grey",
                                                                    "reason": "mule"}),
        api_call(settings, "PUT", f"/v1/lists/card/{quiet}", body={"list": "block"}),
        api_call(settings, "PUT", f"/v1/lists/card/{quiet}",
                 body={"list": "block", "reason": "mule", "until": 1}),
        api_call(settings, "PUT", f"/v1/lists/card/{quiet}", body=b"{"),
        api_call(settings, "DELETE", f"/v1/lists/card/{quiet}", token=READ),
    ]
    assert [(status, body["field"]) for status, body in refused] == [
        (403, "Authorization"), (422, "kind"), (422, "list"), (422, "reason"),
        (422, "until"), (422, None), (403, "Authorization")]
    assert api_call(settings, "GET", "/v1/lists", token=READ) == (200, {"entries": []})

    puts = [("card", allowed_card, "allow"), ("card", quiet, "block"),
            ("merchant", allowed_merchant, "allow")]
    for kind, entity, name in puts:
        status, entry = api_call(settings, "PUT", f"/v1/lists/{kind}/{entity}",
                                 body={"list": name, "reason": f"test {name}"})
        assert status == 200 and (entry["list"], entry["by"]) == (name, "alice")
    status, listed = api_call(settings, "GET", "/v1/lists", token=READ)
    assert status == 200 and len(listed["entries"]) == 3
    lists = Lists.of(ListEntry.from_json(orjson.dumps(e)) for e in listed["entries"])

    # the worker has them from the control topic before a transaction is sent
    wait_until(lambda: _applied(worker.port) == {"allow": 2.0, "block": 1.0}, timeout_s=120,
               what="the worker to read the lists")
    replay_and_settle(settings, [worker], lines)

    live: dict[str, dict[str, Any]] = {}
    for record in read(settings, topics.ACTIONS):
        action = orjson.loads(record.value)
        live[action["idempotency_key"]] = action
    oracle = offline_run(settings, lines, now_ms=now_ms, lists=lists)
    expected = {a.idempotency_key: a for a in oracle.actions}
    assert set(live) == set(expected)
    assert all((live[k]["type"], live[k]["decided_by"], live[k].get("rule"))
               == (a.type, a.decided_by, a.rule) for k, a in expected.items())

    by_card: dict[str, list[dict[str, Any]]] = {}
    for action in live.values():
        by_card.setdefault(action["card_id"], []).append(action)
    # allow: the model froze this card, the lists made every freeze an alert that says so
    assert all(a["type"] == "alert_customer" for a in by_card[allowed_card])
    assert any(a["decided_by"] == "allow_list" and a["rule"] == f"allow:card:{allowed_card}"
               for a in by_card[allowed_card])
    assert not any(a["type"] == "freeze_card" for a in live.values()
                   if a.get("rule") == f"allow:merchant:{allowed_merchant}")
    assert any(a.get("rule") == f"allow:merchant:{allowed_merchant}" for a in live.values())
    # block: the model decided nothing on this card, the list froze it
    assert {(a["type"], a["decided_by"]) for a in by_card[quiet]} == {
        ("freeze_card", "block_list"), ("alert_customer", "block_list")}
    status, card = api_call(settings, "GET", f"/v1/cards/{quiet}", token=READ)
    assert status == 200 and card["status"] == "frozen"
    assert (card["decided_by"], card["rule"]) == ("block_list", f"block:card:{quiet}")
    assert card["history"][0]["by"] == f"block_list block:card:{quiet}"
    status, card = api_call(settings, "GET", f"/v1/cards/{allowed_card}", token=READ)
    assert status == 200 and card["status"] == "active"
    assert any(a["decided_by"] == "allow_list" for a in card["alerts"])

    # removal: a tombstone the worker follows too
    status, removed = api_call(settings, "DELETE", f"/v1/lists/card/{quiet}")
    assert (status, removed["removed"]) == (200, True)
    assert len(api_call(settings, "GET", "/v1/lists")[1]["entries"]) == 2
    wait_until(lambda: _applied(worker.port) == {"allow": 2.0, "block": 0.0}, timeout_s=60,
               what="the worker to drop the block entry")


def test_lists_published_before_the_worker_starts_decide_its_first_batch(
        fresh_settings: Settings, start_action_service: StartActionService,
        start_worker: StartWorker) -> None:
    """Data already waiting when the worker starts: it reads the lists before its first batch,
    so a blocked card's first transaction is frozen (a worker that scored before reading them
    would let it through)."""
    require_compiled_fold()
    settings = with_analysts(with_own_service(fresh_settings, redis_db=14))
    log = make_log(cards=200, txns=3000, seed=41)
    lines = lines_of(log)
    now_ms = time.time_ns() // 1_000_000
    plain = offline_run(settings, lines, now_ms=now_ms)
    table = plain.offline.table
    acted = {a.card_id for a in plain.actions}
    cards = table.column("card_id").to_pylist()
    quiet = next(c for c in cards if c not in acted)
    first_txn = table.column("txn_id")[cards.index(quiet)].as_py()

    service = start_action_service(settings)
    # a control topic long enough that reading it takes a while (a worker that scored
    # before it had read it all would decide the first batches without the block entry)
    produce(settings, topics.CONTROL, [
        (e.control_key(), e.to_json()) for e in (
            ListEntry("allow", "card", f"vip{i}", "payroll", "bob", 1)
            for i in range(30_000))])
    status, _ = api_call(settings, "PUT", f"/v1/lists/card/{quiet}",
                         body={"list": "block", "reason": "mule"})
    assert status == 200
    sent = replay(settings, lines)  # waiting in Kafka before any worker runs
    worker = start_worker(settings)
    wait_drained(settings, [worker], expected=sent)
    wait_dispatched(settings)
    worker.stop()
    service.stop()
    frozen = [orjson.loads(r.value) for r in read(settings, topics.ACTIONS)]
    mine = [a for a in frozen if a["card_id"] == quiet and a["type"] == "freeze_card"]
    assert first_txn in {a["txn_id"] for a in mine}, "the blocked card's first transaction"
    assert all(a["decided_by"] == "block_list" for a in mine)
