"""Allow/block lists: entries checked naming the field, the card before the merchant, and the
rule applied to the model's decision (block freezes, allow downgrades a freeze and says so)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest

from app.control.fold import fold_records
from app.scoring.lists import (
    ALERT,
    FREEZE,
    ListEntry,
    ListEntryError,
    Lists,
    parse_request,
    read_lists_file,
    rule,
)
from app.scoring.policy import Thresholds, build_actions


def _entry(list_name: str, kind: str, entity_id: str) -> ListEntry:
    return ListEntry(list_name, kind, entity_id, "why", "alice", 1_700_000_000_000)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Txn:
    txn_id: str = "t1"
    card_id: str = "c1"
    ts_ms: int = 1_700_000_000_000
    merchant_id: str = "m1"


def test_block_freezes_whatever_the_model_said():
    for model in ((), ALERT, FREEZE):
        assert rule(model, _entry("block", "card", "c1")) == (
            rule(model, _entry("block", "card", "c1")))
        ruling = rule(model, _entry("block", "card", "c1"))
        assert (ruling.types, ruling.decided_by, ruling.rule) == (
            FREEZE, "block_list", "block:card:c1")


def test_allow_downgrades_a_freeze_to_an_alert_and_leaves_the_rest_to_the_model():
    ruling = rule(FREEZE, _entry("allow", "merchant", "m1"))
    assert (ruling.types, ruling.decided_by, ruling.rule) == (
        ALERT, "allow_list", "allow:merchant:m1")
    for model in ((), ALERT):
        assert rule(model, _entry("allow", "card", "c1")).decided_by == "model"
        assert rule(model, _entry("allow", "card", "c1")).types == model


def test_the_card_entry_wins_over_the_merchant_entry():
    lists = Lists.of([_entry("block", "merchant", "m1"), _entry("allow", "card", "c1")])
    assert lists.match("c1", "m1").rule == "allow:card:c1"  # type: ignore[union-attr]
    assert lists.match("c2", "m1").rule == "block:merchant:m1"  # type: ignore[union-attr]
    assert lists.match("c2", "m2") is None


def test_an_entity_is_on_one_list_the_latest_entry_wins():
    lists = Lists.of([_entry("allow", "card", "c1"), _entry("block", "card", "c1")])
    assert len(lists) == 1 and lists.match("c1", "m")
    assert lists.match("c1", "m").list == "block"  # type: ignore[union-attr]


def test_build_actions_records_who_decided():
    policy = Thresholds(freeze=0.9, alert=0.5)
    low = build_actions(_Txn(), 0.1, "m-1", 1_700_000_000_000, thresholds=policy,
                        entry=_entry("block", "card", "c1"))
    assert [(a.type, a.decided_by, a.rule) for a in low] == [
        ("freeze_card", "block_list", "block:card:c1"),
        ("alert_customer", "block_list", "block:card:c1")]
    high = build_actions(_Txn(), 0.95, "m-1", 1_700_000_000_000, thresholds=policy,
                         entry=_entry("allow", "card", "c1"))
    assert [(a.type, a.decided_by) for a in high] == [("alert_customer", "allow_list")]
    plain = build_actions(_Txn(), 0.95, "m-1", 1_700_000_000_000, thresholds=policy)
    assert [(a.type, a.decided_by, a.rule) for a in plain] == [
        ("freeze_card", "model", None), ("alert_customer", "model", None)]
    # the same keys as the model's own decision: a list changes what, never the identity
    assert {a.idempotency_key for a in low} == {a.idempotency_key for a in plain}


@pytest.mark.parametrize(("kind", "entity_id", "body", "field"), [
    ("person", "c1", {"list": "allow", "reason": "x"}, "kind"),
    ("card", "c 1", {"list": "allow", "reason": "x"}, "id"),
    ("card", "c1", {"list": "grey", "reason": "x"}, "list"),
    ("card", "c1", {"reason": "x"}, "list"),
    ("card", "c1", {"list": "block"}, "reason"),
    ("card", "c1", {"list": "block", "reason": "  "}, "reason"),
    ("card", "c1", {"list": "block", "reason": "x" * 501}, "reason"),
    ("card", "c1", {"list": "block", "reason": "x", "until": 5}, "until"),
])
def test_a_bad_request_names_its_field(kind, entity_id, body, field):
    with pytest.raises(ListEntryError) as err:
        parse_request(kind, entity_id, orjson.dumps(body), by="alice", at_ms=1)
    assert err.value.field == field


def test_a_bad_body_is_refused_as_a_whole():
    for raw in (b"{", b"[1]"):
        with pytest.raises(ListEntryError) as err:
            parse_request("card", "c1", raw, by="alice", at_ms=1)
        assert err.value.field is None


def test_an_entry_round_trips_and_a_lists_file_names_the_bad_line():
    entry = _entry("block", "card", "c1")
    assert ListEntry.from_json(entry.to_json()) == entry
    lists = read_lists_file([entry.to_json(), b"", _entry("allow", "merchant", "m").to_json()])
    assert len(lists) == 2
    with pytest.raises(ListEntryError, match="line 2"):
        read_lists_file([entry.to_json(), b'{"list": "block"}'])


@dataclass(frozen=True)
class _Rec:
    key: bytes | None
    value: bytes | None


def test_the_control_topic_folds_to_the_current_lists():
    c1, m1 = _entry("block", "card", "c1"), _entry("allow", "merchant", "m1")
    records = [
        _Rec(b"active_model", b'{"version": "v"}'),  # the model activation: not a list record
        _Rec(c1.control_key(), c1.to_json()),
        _Rec(m1.control_key(), m1.to_json()),
        _Rec(c1.control_key(), None),  # removed
        _Rec(b"list:card:c9", b"not json"),  # refused, logged
        _Rec(b"list:card:c8", c1.to_json()),  # names another entity: refused
    ]
    lists = fold_records(records).lists()
    assert list(lists.entries) == ["merchant:m1"]
