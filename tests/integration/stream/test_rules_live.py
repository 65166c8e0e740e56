"""Rules and the review queue on the real stack: written through the action service (422 naming
the rule and the position, 403 for a read-only token, nothing written on a refusal), carried to
the worker by the control topic without a restart, deciding freeze / review / allow with
`decided_by` rule and `<id>@<version>` exactly as the offline oracle and `fraudstream backtest
--active-rules` decide with the same rules; a log_only rule acts on nothing and counts its hits;
a review closed as fraud or legitimate writes exactly one label and the card follows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from app.features.merchant import MerchantTable
from app.harness.pipeline import (
    label_records,
    lines_of,
    make_log,
    read,
    replay_and_settle,
    require_compiled_fold,
    send_label_records,
    with_own_service,
)
from app.harness.procs import wait_all_assigned, wait_until
from app.kafka import topics
from app.rules.rule import Rule
from app.rules.ruleset import RuleSet
from app.scoring.lists import ListEntry, Lists
from app.scoring.oracle import rule_columns
from app.settings import Settings
from app.transactions.labels import LabelRecord
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

ROOT = Path(__file__).resolve().parents[3]


def _review_labels(settings: Settings) -> list[LabelRecord]:
    return [x for x in (LabelRecord.from_json(r.value) for r in read(settings, topics.LABELS))
            if x.source == "analyst_review"]


def test_rules_decide_live_as_offline_and_reviews_close_once(
        fresh_settings: Settings, tmp_path: Path, start_action_service: StartActionService,
        start_worker: StartWorker) -> None:
    require_compiled_fold()
    settings = with_analysts(with_own_service(fresh_settings, redis_db=13))
    log = make_log(cards=300, txns=6000, seed=37)
    lines = lines_of(log)
    now_ms = time.time_ns() // 1_000_000
    records = label_records(log)  # on the labels topic before the worker starts
    merchants = MerchantTable.of(records)
    plain = offline_run(settings, lines, now_ms=now_ms, extra=("merchant_id", "amount_minor"),
                        merchants=merchants)
    table = plain.offline.table
    amounts = table.column("amount_minor").to_numpy()
    big = int(np.quantile(amounts, 0.99))
    scores = np.asarray(plain.scores, dtype=np.float64)
    alert = plain.thresholds.alert
    low, high = float(np.quantile(scores[scores < alert], 0.98)), alert  # near misses
    frozen = [a for a in plain.actions if a.type == "freeze_card"]
    assert frozen, "the model froze nothing in this log"
    row = table.column("txn_id").to_pylist().index(frozen[0].txn_id)
    merchant = table.column("merchant_id")[row].as_py()

    send_label_records(settings, records)
    start_action_service(settings)
    workers = [start_worker(settings, name=f"w{i}") for i in range(2)]
    bad = {"id": "typo", "expression": "amount_minor > 10 and merchant_fraud_shar_7d > 0.2",
           "action": "freeze_card", "owner": "risk", "reason": "test"}
    status, body = api_call(settings, "POST", "/v1/rules", body=bad)
    assert (status, body["rule"], body["field"], body["position"]) == (
        422, "typo", "expression", {"line": 1, "column": 23})
    status, body = api_call(settings, "POST", "/v1/rules", token=READ,
                            body={**bad, "expression": "True"})
    assert (status, body["field"]) == (403, "Authorization")
    assert api_call(settings, "GET", "/v1/rules", token=READ) == (200, {"rules": []})

    written = [
        {"id": "big", "expression": f"amount_minor > {big * 10}", "action": "freeze_card"},
        {"id": "near-miss", "expression": f"between(score, {low!r}, {high!r}) and "
                                          f"score < {high!r}", "action": "review"},
        {"id": "trusted-merchant", "expression": f"merchant_id == '{merchant}'",
         "action": "allow", "order": 1},
        {"id": "busy", "expression": "count_1h >= 2", "action": "alert_customer",
         "mode": "log_only"},
    ]
    for r in written:
        status, body = api_call(settings, "POST", "/v1/rules",
                                body={"owner": "risk", "reason": "test", **r})
        assert status == 201 and (body["version"], body["author"]) == (1, "alice"), body
    status, body = api_call(settings, "PATCH", "/v1/rules/big",
                            body={"expression": f"amount_minor > {big}"})
    assert status == 200 and body["version"] == 2
    assert api_call(settings, "POST", "/v1/rules", body={**written[0], "owner": "o",
                                                           "reason": "r"})[0] == 409
    status, history = api_call(settings, "GET", "/v1/rules/big", token=READ)
    assert [v["version"] for v in history["history"]] == [1, 2]
    status, listed = api_call(settings, "GET", "/v1/rules", token=READ)
    rules = RuleSet.of(Rule.from_json(orjson.dumps({k: v for k, v in r.items()}))
                       for r in listed["rules"])
    assert [r.name for r in rules.rules] == ["trusted-merchant@1", "big@2", "near-miss@1",
                                             "busy@1"]

    # and a list entry, which comes before every rule
    acted = {a.card_id for a in plain.actions}
    blocked = next(c for c in table.column("card_id").to_pylist() if c not in acted)
    status, _ = api_call(settings, "PUT", f"/v1/lists/card/{blocked}",
                         body={"list": "block", "reason": "mule"})
    assert status == 200
    entries = api_call(settings, "GET", "/v1/lists", token=READ)[1]["entries"]
    lists = Lists.of(ListEntry.from_json(orjson.dumps(e)) for e in entries)
    # every worker follows the control topic itself, without a restart
    wait_all_assigned(workers, settings.topic(topics.TRANSACTIONS))
    wait_until(lambda: all(
        metric_values(w.port, r'^fraudstream_rules\{mode="(\w+)"\} (\S+)$')
        == {"active": 3.0, "log_only": 1.0} and metric_values(
            w.port, r'^fraudstream_list_entries\{list="(block)"\} (\S+)$') == {"block": 1.0}
        for w in workers), timeout_s=120, what="every worker to read the rules")
    replay_and_settle(settings, workers, lines)

    live = {}
    first_freeze: dict[str, dict[str, Any]] = {}  # per card, in the order it was applied
    for record in read(settings, topics.ACTIONS):
        action = orjson.loads(record.value)
        live[action["idempotency_key"]] = action
        if action["type"] == "freeze_card":
            first_freeze.setdefault(action["card_id"], action)
    oracle = offline_run(settings, lines, now_ms=now_ms, rules=rules, merchants=merchants,
                         lists=lists)
    expected = {a.idempotency_key: a for a in oracle.actions}
    assert set(live) == set(expected)
    assert all((live[k]["type"], live[k]["decided_by"], live[k].get("rule"))
               == (a.type, a.decided_by, a.rule) for k, a in expected.items())
    assert {(a["type"], a["decided_by"]) for a in live.values()
            if a["card_id"] == blocked} == {("freeze_card", "block_list"),
                                            ("alert_customer", "block_list")}
    by_rule: dict[str | None, set[str]] = {}
    for a in live.values():
        by_rule.setdefault(a.get("rule"), set()).add(a["type"])
    assert by_rule.get("big@2") == {"freeze_card", "alert_customer"}
    assert by_rule.get("near-miss@1") == {"review"}
    assert "big@1" not in by_rule and "busy@1" not in by_rule  # replaced; log_only
    # the card a rule froze says which rule version did
    card_id = next(c for c, a in first_freeze.items() if a.get("rule") == "big@2")
    status, card = api_call(settings, "GET", f"/v1/cards/{card_id}", token=READ)
    assert (card["status"], card["decided_by"], card["rule"]) == ("frozen", "rule", "big@2")
    assert card["history"][0]["by"] == "rule big@2"
    # the allowed merchant's transactions decided nothing (the allow rule comes first)
    merchants = dict(zip(table.column("txn_id").to_pylist(),
                         table.column("merchant_id").to_pylist(), strict=True))
    assert not any(merchants.get(a["txn_id"]) == merchant for a in live.values())
    # the log_only rule counted every row it holds for (the log has no redelivery)
    holds = rules.compiled[3].mask(rule_columns(oracle.offline, np.asarray(
        oracle.scores, dtype=np.float64), {}))
    hits = sum(metric_values(w.port, r'^fraudstream_rule_hits_total\{mode="log_only",'
                             r'rule="(busy)",version="1"\} (\S+)$').get("busy", 0.0)
               for w in workers)
    assert hits == int(holds.sum()) > 0

    # the backtest under the same rules reproduces the live actions
    log_path, rules_path = tmp_path / "log.jsonl", tmp_path / "rules.jsonl"
    log_path.write_bytes(b"\n".join(lines) + b"\n")
    labels_path = tmp_path / "labels.jsonl"
    labels_path.write_bytes(b"".join(log.label_chunks()))
    rules_path.write_bytes(b"\n".join(orjson.dumps(r) for r in listed["rules"]) + b"\n")
    lists_path = tmp_path / "lists.jsonl"
    lists_path.write_bytes(b"\n".join(orjson.dumps(e) for e in entries) + b"\n")
    out = tmp_path / "actions.jsonl"
    subprocess.run([sys.executable, "-m", "app.cli.main", "backtest", "--events",
                    str(log_path), "--labels", str(labels_path), "--active-rules",
                    str(rules_path), "--lists", str(lists_path), "--now", str(now_ms),
                    "--out-actions", str(out)],
                   check=True, cwd=ROOT, capture_output=True, timeout=300)
    offline = {json.loads(x)["idempotency_key"]: json.loads(x)
               for x in out.read_text().splitlines()}
    assert {k: (a["type"], a.get("rule")) for k, a in offline.items()} == {
        k: (a["type"], a.get("rule")) for k, a in live.items()}

    # the review queue: one review per review action, oldest first
    reviews = [a for a in live.values() if a["type"] == "review"]
    status, queue = api_call(settings, "GET", "/v1/reviews?status=open&limit=1000", token=READ)
    assert status == 200 and queue["open"] == len(reviews) == len(queue["reviews"])
    assert [r["queued_at_ms"] for r in queue["reviews"]] == sorted(
        r["queued_at_ms"] for r in queue["reviews"])
    first, second = queue["reviews"][0], queue["reviews"][1]
    assert first["rule"] == "near-miss@1" and first["status"] == "open"
    close = f"/v1/reviews/{first['id']}/close"
    status, closed = api_call(settings, "POST", close, body={"outcome": "fraud",
                                                            "reason": "confirmed by phone"},
                              key="case-1")
    assert status == 201 and closed["card"] in ("frozen", "already_frozen"), closed
    again = api_call(settings, "POST", close, body={"outcome": "fraud",
                                                    "reason": "confirmed by phone"},
                     key="case-1")
    assert again == (200, closed)
    other = api_call(settings, "POST", close, body={"outcome": "legitimate"},
                     key="case-2")
    assert other[0] == 409 and other[1]["close"]["idempotency_key"] == "case-1"
    status, card = api_call(settings, "GET", f"/v1/cards/{first['card_id']}", token=READ)
    assert card["status"] == "frozen"
    status, closed2 = api_call(settings, "POST", f"/v1/reviews/{second['id']}/close",
                               body={"outcome": "legitimate"},
                               key="case-3")
    assert status == 201 and closed2["outcome"] == "legitimate"
    status, queue = api_call(settings, "GET", "/v1/reviews", token=READ)
    assert queue["open"] == len(reviews) - 2
    # exactly one label per closed review, on the labels topic (the outbox forwarder)
    wanted = sorted([(first["txn_id"], 1), (second["txn_id"], 0)])
    wait_until(lambda: len(_review_labels(settings)) >= 2, timeout_s=60,
               what="the review labels on the labels topic")
    assert sorted((x.txn_id, x.label) for x in _review_labels(settings)) == wanted
