"""The offline oracle: what a log must yield, and that live-style micro-batches yield the same."""

from __future__ import annotations

from collections import Counter

import orjson
from click.testing import CliRunner
from scoring_support import LATENESS_MS, SmallLog

from app.actions import Action, idempotency_key
from app.cli.score import score as score_cmd
from app.features.declaration import FEATURE_NAMES
from app.features.merchant import EMPTY as NO_LABELS
from app.features.state import Accepted, CardState, Redelivered
from app.scoring.oracle import OracleRun, oracle_actions, run_oracle
from app.scoring.policy import build_actions, decide
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import features_matrix
from app.transactions.contract import ContractError, parse_transaction


def _run(small_log: SmallLog, registry: ModelRegistry, version: str | None = None,
         lines: list[bytes] | None = None) -> OracleRun:
    return run_oracle(small_log.lines if lines is None else lines, registry, version=version,
                      allowed_lateness_ms=LATENESS_MS, now_ms=small_log.now_ms)


def test_oracle_yields_both_action_types_per_policy_in_log_order(
    small_log: SmallLog, registry: ModelRegistry
) -> None:
    run = _run(small_log, registry)
    counts = run.counts
    assert counts["alert_customer"] > counts["freeze_card"] > 0  # an alert-only band exists
    keys = [a.idempotency_key for a in run.actions]
    assert len(keys) == len(set(keys))
    assert all(a.idempotency_key == idempotency_key(a.type, a.txn_id) for a in run.actions)
    assert all(a.decided_at_ms == a.ts_ms and a.model_version == run.model_version
               for a in run.actions)
    # exactly what the policy says for every scored row, in the offline table's (log) order
    table = run.offline.table
    expected = [(tid, kind) for tid, s in zip(table.column("txn_id").to_pylist(),
                                              run.scores.tolist(), strict=True)
                for kind in decide(s, run.thresholds)]
    assert [(a.txn_id, a.type) for a in run.actions] == expected
    freezes = {a.txn_id for a in run.actions if a.type == "freeze_card"}
    alerts = {a.txn_id for a in run.actions if a.type == "alert_customer"}
    assert freezes < alerts


def test_late_malformed_and_redelivered_lines_yield_nothing_more(
    small_log: SmallLog, registry: ModelRegistry
) -> None:
    run = _run(small_log, registry)
    assert run.offline.late > 0 and run.offline.redelivered > 0 and run.offline.malformed_total > 0
    acted = {a.txn_id for a in run.actions}
    assert acted.isdisjoint(run.offline.late_txn_ids)
    assert acted.isdisjoint(run.offline.malformed_txn_ids)
    clean = [line for line, kind in zip(small_log.lines, small_log.kinds, strict=True)
             if kind == "valid"]
    assert len(clean) < len(small_log.lines)
    assert _run(small_log, registry, lines=clean).actions == run.actions


def test_keys_are_identical_across_model_versions(
    small_log: SmallLog, registry: ModelRegistry
) -> None:
    a_version, b_version = registry.versions()
    a = {(x.type, x.txn_id): x for x in _run(small_log, registry, a_version).actions}
    b = {(x.type, x.txn_id): x for x in _run(small_log, registry, b_version).actions}
    common = a.keys() & b.keys()
    assert len(common) > 10
    assert all(a[k].idempotency_key == b[k].idempotency_key for k in common)
    assert all(a[k].model_version != b[k].model_version for k in common)


def test_live_style_micro_batches_give_the_oracle_actions_exactly(
    small_log: SmallLog, registry: ModelRegistry
) -> None:
    """The worker's shape: fold per event, score micro-batches of 64, re-send on redelivery."""
    loaded = registry.load()
    states: dict[str, CardState] = {}
    sent: list[Action] = []
    batch: list[tuple[object, tuple[int | float, ...]]] = []

    def flush() -> None:
        scores = loaded.scorer.score(features_matrix([f for _, f in batch]))
        for (txn, _), s in zip(batch, scores.tolist(), strict=True):
            sent.extend(build_actions(txn, s, loaded.version, 1_900_000_000_000,  # wall clock
                                      thresholds=loaded.thresholds))
        batch.clear()

    for raw in small_log.lines:
        try:
            txn = parse_transaction(raw, now_ms=small_log.now_ms)
        except ContractError:
            continue
        state = states.setdefault(txn.card_id, CardState.empty())
        outcome = state.apply(txn, allowed_lateness_ms=LATENESS_MS)
        if isinstance(outcome, Accepted | Redelivered):
            batch.append((txn, (*outcome.features, *NO_LABELS)))  # no label feed here
            if len(batch) == 64:
                flush()
    flush()
    # the action service keeps the first action per key; a redelivery re-sends the same key
    first: dict[str, Action] = {}
    for action in sent:
        prior = first.setdefault(action.idempotency_key, action)
        assert (prior.type, prior.txn_id, prior.score) == (action.type, action.txn_id,
                                                           action.score)
    oracle = oracle_actions(small_log.lines, loaded, allowed_lateness_ms=LATENESS_MS,
                            now_ms=small_log.now_ms)
    assert len(sent) > len(first)  # redeliveries did re-send keys
    strip = [(a.idempotency_key, a.type, a.card_id, a.txn_id, a.ts_ms, a.score)
             for a in first.values()]
    assert strip == [(a.idempotency_key, a.type, a.card_id, a.txn_id, a.ts_ms, a.score)
                     for a in oracle]


def test_score_cli_writes_contract_actions_and_served_rows(
    tmp_path, small_log: SmallLog, registry: ModelRegistry
) -> None:
    out, served = tmp_path / "actions.jsonl", tmp_path / "served.jsonl"
    result = CliRunner().invoke(score_cmd, [
        "--events", str(small_log.events_path), "--out", str(out), "--served-out", str(served),
        "--model-dir", str(registry.root), "--now", str(small_log.now_ms),
        "--lateness-ms", str(LATENESS_MS)])
    assert result.exit_code == 0, result.output
    run = _run(small_log, registry)
    actions = [Action.from_json(line) for line in out.read_bytes().splitlines()]
    assert actions == run.actions
    counts = run.counts
    assert (f"freeze_card={counts['freeze_card']} alert_customer={counts['alert_customer']}"
            in result.output)
    rows = [orjson.loads(line) for line in served.read_bytes().splitlines()]
    assert len(rows) == run.offline.accepted
    assert list(rows[0]["features"]) == list(FEATURE_NAMES)
    assert Counter(r["model_version"] for r in rows) == {run.model_version: len(rows)}
    assert [r["score"] for r in rows] == run.scores.tolist()

    bad = CliRunner().invoke(score_cmd, [
        "--events", str(small_log.events_path), "--out", str(out),
        "--model-dir", str(registry.root), "--model", "mlp-missing"])
    assert bad.exit_code == 1 and "not found" in bad.output
    override = CliRunner().invoke(score_cmd, [
        "--events", str(small_log.events_path), "--out", str(out), "--freeze", "0.01",
        "--alert", "0.5", "--model-dir", str(registry.root), "--now", str(small_log.now_ms)])
    assert override.exit_code == 2 and "above freeze" in override.output
