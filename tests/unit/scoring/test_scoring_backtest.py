"""The backtest: the active policy's actions are the oracle's, a stricter policy freezes less and
the diff is exactly the actions that differ, every figure equals a direct count, and every bad
input is one line naming it."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner
from scoring_support import LATENESS_MS, SmallLog

from app.actions import Action
from app.cli.backtest import backtest as backtest_cmd
from app.scoring.backtest import Rows, Truth, compare, day_of, evaluate, parse_policy
from app.scoring.lists import ListEntry, Lists
from app.scoring.oracle import decide_rows, run_oracle
from app.scoring.policy import Thresholds
from app.scoring.registry import ModelRegistry
from app.transactions.labels import LabelRecord


def _label(txn_id: str | None, label: int, at: int, card_id: str | None = None) -> LabelRecord:
    return LabelRecord("id", txn_id, card_id, label, at, "test")


def test_truth_takes_the_latest_label_and_the_card_when_the_transaction_has_none():
    truth = Truth.of([_label("t1", 1, 10), _label("t1", 0, 20), _label("t2", 0, 5),
                      _label(None, 1, 7, card_id="c9")])
    assert not truth.is_fraud("t1", "c1")  # released later
    assert not truth.is_fraud("t2", "c9")  # the transaction's own label wins
    assert truth.is_fraud("t3", "c9") and not truth.is_fraud("t3", "c1")


def _run(small_log: SmallLog, registry: ModelRegistry, lists: Lists = Lists()):  # noqa: ANN202, B008
    return run_oracle(small_log.lines, registry, allowed_lateness_ms=LATENESS_MS,
                      now_ms=small_log.now_ms, explain=False, lists=lists,
                      extra=("merchant_id", "amount_minor"))


def test_figures_equal_a_direct_count_and_a_stricter_policy_freezes_less(
        small_log: SmallLog, registry: ModelRegistry) -> None:
    run = _run(small_log, registry)
    table = run.offline.table
    rows = Rows(*(table.column(n).to_pylist() for n in ("txn_id", "card_id", "ts_ms",
                                                        "amount_minor")), run.scores.tolist())
    truth = Truth.of(_label(x.txn_id, x.label, x.label_ts_ms) for x in small_log.labels)
    active = evaluate("active", run.thresholds, run.actions, rows, truth)
    # the active outcome is built on exactly the oracle's actions
    assert active.actions == run.actions
    frozen = {a.txn_id for a in run.actions if a.type == "freeze_card"}
    fraud = {t for t, c in zip(rows.txn_id, rows.card_id, strict=True) if truth.is_fraud(t, c)}
    assert active.total.freezes == len(frozen) > 0 and active.total.fraud == len(fraud) > 0
    assert active.total.precision == len(frozen & fraud) / len(frozen)
    assert active.total.recall == len(frozen & fraud) / len(fraud)
    amount = dict(zip(rows.txn_id, rows.amount_minor, strict=True))
    assert active.total.fraud_amount_caught == sum(amount[t] for t in frozen & fraud)
    assert sum(d.freezes for d in active.days.values()) == active.total.freezes
    ts = dict(zip(rows.txn_id, rows.ts_ms, strict=True))
    first_day = min(active.days)
    assert active.days[first_day].freezes == sum(1 for t in frozen if day_of(ts[t]) == first_day)
    cards = dict(zip(rows.txn_id, rows.card_id, strict=True))
    fraud_cards = {cards[t] for t in fraud}
    assert active.cards_frozen_wrongly == len({cards[t] for t in frozen} - fraud_cards)

    stricter = Thresholds(freeze=min(1.0, run.thresholds.freeze + 0.3),
                          alert=run.thresholds.alert)
    model = registry.load(None)
    cand_actions, _ = decide_rows(model, run.offline, run.scores, stricter, explain=False)
    candidate = evaluate("candidate", stricter, cand_actions, rows, truth)
    assert candidate.total.freezes < active.total.freezes
    diff = compare(active, candidate, truth)
    before = {a.idempotency_key for a in run.actions}
    after = {a.idempotency_key for a in cand_actions}
    assert {c.action.idempotency_key for c in diff.changes if c.kind == "removed"} == (
        before - after) and before - after
    assert {c.action.idempotency_key for c in diff.changes if c.kind == "added"} == after - before
    assert all(c.action.type == "freeze_card" for c in diff.changes if c.kind == "removed")


def test_lists_decide_in_the_backtest_as_in_the_worker(small_log: SmallLog,
                                                       registry: ModelRegistry) -> None:
    plain = _run(small_log, registry)
    card = next(a.card_id for a in plain.actions if a.type == "freeze_card")
    entry = ListEntry("allow", "card", card, "vip", "alice", 1)
    listed = _run(small_log, registry, Lists.of([entry]))
    assert not any(a.type == "freeze_card" and a.card_id == card for a in listed.actions)
    assert any(a.decided_by == "allow_list" and a.card_id == card for a in listed.actions)


def test_cli_prints_both_policies_and_writes_the_active_actions_and_the_diff(
        tmp_path, small_log: SmallLog, registry: ModelRegistry) -> None:
    policy = tmp_path / "strict.json"
    base = registry.load(None).thresholds
    policy.write_text(orjson.dumps({"freeze": min(1.0, base.freeze + 0.3)}).decode())
    out, diff = tmp_path / "actions.jsonl", tmp_path / "diff.jsonl"
    result = CliRunner().invoke(backtest_cmd, [
        "--events", str(small_log.events_path), "--labels", str(small_log.labels_path),
        "--policy", str(policy), "--model-dir", str(registry.root),
        "--now", str(small_log.now_ms), "--lateness-ms", str(LATENESS_MS),
        "--out-actions", str(out), "--diff-out", str(diff)])
    assert result.exit_code == 0, result.output
    run = _run(small_log, registry)
    written = [Action.from_json(line) for line in out.read_bytes().splitlines()]
    assert [a.idempotency_key for a in written] == [a.idempotency_key for a in run.actions]
    changes = [orjson.loads(line) for line in diff.read_bytes().splitlines()]
    assert changes and all(c["change"] == "removed" and c["type"] == "freeze_card"
                           for c in changes)
    assert f"actions that change: {len(changes):,}" in result.output
    for line in ("freezes", "precision of freezes", "recall of fraud", "fraud amount caught",
                 "cards frozen wrongly", "per day (UTC)"):
        assert line in result.output


@pytest.mark.parametrize(("content", "message"), [
    (b"{", "not valid JSON"),
    (b'{"freeze": 2}', "freeze must be in [0, 1]"),
    (b'{"freeze": "high"}', "freeze: must be a number"),
    (b'{"freze": 0.5}', "freze: unknown field"),
])
def test_a_bad_policy_file_is_one_line_naming_the_field(tmp_path, small_log: SmallLog,
                                                        registry: ModelRegistry, content: bytes,
                                                        message: str) -> None:
    policy = tmp_path / "policy.json"
    policy.write_bytes(content)
    result = CliRunner().invoke(backtest_cmd, [
        "--events", str(small_log.events_path), "--labels", str(small_log.labels_path),
        "--policy", str(policy), "--model-dir", str(registry.root)])
    assert result.exit_code == 1 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_bad_labels_and_lists_are_one_line_and_nothing_is_computed(
        tmp_path, small_log: SmallLog, registry: ModelRegistry) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b'{"txn_id": "t1", "label": 1, "label_ts_ms": 1767830522244}\n'
                       b'{"txn_id": "t2", "label": 7, "label_ts_ms": 1767830522244}\n')
    result = CliRunner().invoke(backtest_cmd, [
        "--events", str(small_log.events_path), "--labels", str(labels),
        "--model-dir", str(registry.root), "--now", str(small_log.now_ms)])
    assert result.exit_code == 1 and "line 2: label:" in result.output
    assert "freezes" not in result.output
    lists = tmp_path / "lists.jsonl"
    lists.write_bytes(b'{"list": "grey", "kind": "card", "id": "c1", "reason": "x", '
                      b'"by": "a", "at_ms": 1}\n')
    result = CliRunner().invoke(backtest_cmd, [
        "--events", str(small_log.events_path), "--labels", str(small_log.labels_path),
        "--lists", str(lists), "--model-dir", str(registry.root)])
    assert result.exit_code == 1 and "line 1: list:" in result.output
    assert "(field: list)" in result.output


def test_parse_policy_keeps_the_active_value_it_does_not_name():
    base = Thresholds(freeze=0.9, alert=0.5)
    assert parse_policy(b'{"alert": 0.6}', base) == Thresholds(freeze=0.9, alert=0.6)
    with pytest.raises(ValueError, match="above freeze"):
        parse_policy(b'{"alert": 0.95}', base)
