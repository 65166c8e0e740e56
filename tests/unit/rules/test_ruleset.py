"""Rule versions, the rule set's order and precedence, the control fold, the rules file."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from app.control.fold import fold_records
from app.features.declaration import FEATURE_NAMES
from app.rules.rule import Rule, RuleError, check_request, read_rules_file
from app.rules.ruleset import RuleSet
from app.scoring.lists import ListEntry
from app.scoring.policy import Thresholds, build_actions


def rule(rid: str, expression: str, action: str = "freeze_card", *, version: int = 1,
         mode: str = "active", order: int = 10) -> Rule:
    return Rule(id=rid, version=version, expression=expression, action=action,  # type: ignore[arg-type]
                mode=mode, owner="team", reason="why", order=order, author="alice",  # type: ignore[arg-type]
                at_ms=1)


@dataclass(frozen=True)
class Txn:
    txn_id: str
    card_id: str
    ts_ms: int
    amount_minor: int
    merchant_id: str = "m1"
    currency: str = "USD"
    mcc: int = 5411
    country: str = "US"
    channel: str = "pos"


@dataclass(frozen=True)
class Row:
    txn: Txn
    features: tuple[int | float, ...]


def rows(amounts: list[int]) -> list[Row]:
    zero = tuple(0 for _ in FEATURE_NAMES)
    return [Row(Txn(f"t{i}", f"c{i}", 3_600_000 * i, a), zero) for i, a in enumerate(amounts)]


def test_first_active_rule_in_order_decides_and_log_only_counts() -> None:
    rs = RuleSet.of([
        rule("late", "amount_minor > 100", "alert_customer", order=20),
        rule("early", "amount_minor > 500", "review", order=10),
        rule("watch", "amount_minor > 0", "freeze_card", mode="log_only", order=5),
        rule("off", "True", mode="disabled", order=1),
    ])
    assert [r.id for r in rs.rules] == ["watch", "early", "late"]
    found = rs.evaluate(rows([50, 200, 900]), np.zeros(3))
    assert found.deciding.tolist() == [-1, 2, 1]  # late for 200, early for 900
    assert found.hits == (3, 1, 2)  # log_only holds for all, decides none


def test_a_higher_version_replaces_a_lower_one_in_any_order() -> None:
    v1, v2 = rule("r", "amount_minor > 1"), rule("r", "amount_minor > 1000", version=2)
    for versions in ([v1, v2], [v2, v1]):
        rs = RuleSet.of(versions)
        assert rs.current["r"].version == 2
        assert rs.evaluate(rows([50]), np.zeros(1)).deciding.tolist() == [-1]


def test_listed_reads_the_rows_entry() -> None:
    rs = RuleSet.of([rule("blocked-big", "listed('block') and amount_minor > 10", "review")])
    entry = ListEntry("block", "card", "c1", "mule", "bob", 1)
    found = rs.evaluate(rows([50, 50]), np.zeros(2), [None, entry])
    assert found.deciding.tolist() == [-1, 0]


def test_precedence_lists_then_rules_then_model() -> None:
    thresholds = Thresholds(freeze=0.9, alert=0.5)
    t0 = 1_767_225_600_000
    txn = Txn("t1", "c1", t0, 100)
    r = rule("r", "True", "review", version=3)
    allow = ListEntry("allow", "card", "c1", "vip", "bob", 1)

    def kinds(score: float, entry: ListEntry | None, deciding: Rule | None) -> list[tuple]:
        return [(a.type, a.decided_by, a.rule) for a in build_actions(
            txn, score, "m", t0, thresholds=thresholds, entry=entry, deciding=deciding)]

    assert kinds(0.95, None, None) == [("freeze_card", "model", None),
                                       ("alert_customer", "model", None)]
    assert kinds(0.95, None, r) == [("review", "rule", "r@3")]
    assert kinds(0.95, allow, r) == [("alert_customer", "allow_list", "allow:card:c1")]
    assert kinds(0.95, None, replace(r, action="allow")) == []
    assert kinds(0.1, None, replace(r, action="freeze_card")) == [
        ("freeze_card", "rule", "r@3"), ("alert_customer", "rule", "r@3")]


def test_requests_are_checked_with_the_position_of_an_expression_error() -> None:
    with pytest.raises(RuleError) as info:
        check_request({"id": "r1", "expression": "amount_minor > 'x'", "action": "review",
                       "owner": "o", "reason": "r"}, partial=False)
    assert (info.value.rule_id, info.value.field, info.value.line, info.value.column) == (
        "r1", "expression", 1, 16)
    assert info.value.to_dict()["position"] == {"line": 1, "column": 16}
    for bad, field in ((("action", "block"), "action"), (("mode", "on"), "mode"),
                       (("id", "Bad Id"), "id"), (("order", -1), "order"),
                       (("colour", "red"), "colour")):
        body = {"id": "r1", "expression": "True", "action": "review", "owner": "o",
                "reason": "r", "order": 1, bad[0]: bad[1]}
        with pytest.raises(RuleError) as info:
            check_request(body, partial=False)
        assert info.value.field == field


class _Rec:
    def __init__(self, key: bytes | None, value: bytes | None) -> None:
        self.key, self.value = key, value


def test_the_control_fold_keeps_every_version_and_serves_the_latest() -> None:
    v1, v2 = rule("r", "amount_minor > 1"), rule("r", "amount_minor > 2", version=2)
    forged = rule("r", "True", version=2)
    fold = fold_records([
        _Rec(v1.control_key(), v1.to_json()),
        _Rec(b"active_model", b'{"version": "m2"}'),
        _Rec(v2.control_key(), v2.to_json()),
        _Rec(v2.control_key(), forged.to_json()),  # a version is immutable: the first stays
        _Rec(b"rule:x@1", v1.to_json()),  # names another version: refused
        _Rec(b"rule:y@1", b"not json"),
        _Rec(b"rule:r@3", None),  # rules are never deleted
    ])
    assert [r.version for r in fold.history("r")] == [1, 2]
    assert fold.rules().current["r"].expression == "amount_minor > 2"
    assert fold.activation == "m2"


def test_a_rules_file_takes_written_rules_and_bare_ones() -> None:
    written = rule("w", "score > 0.5", version=4)
    found = read_rules_file([written.to_json(), b"",
                             b'{"id": "bare", "expression": "True", "action": "allow"}'])
    assert found[0] == written
    assert (found[1].name, found[1].order, found[1].mode) == ("bare@1", 30, "active")
    with pytest.raises(RuleError, match="line 2"):
        read_rules_file([b'{"id": "a", "expression": "True", "action": "allow"}',
                         b'{"id": "b", "expression": "nope > 1", "action": "allow"}'])
