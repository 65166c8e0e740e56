"""A shadow model on the real stack: it never changes the effects ledger, and `model compare`
lists exactly the actions whose decision differs between the two models offline."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from app.datagen.writer import write_labels
from app.harness.pipeline import (
    effects,
    lines_of,
    make_log,
    replay,
    replay_and_settle,
    require_compiled_fold,
    wait_drained,
    with_own_service,
)
from app.harness.procs import wait_until
from app.harness.rollout import add_shifted_version
from app.kafka import topics
from app.kafka.shadowrow import iter_shadow_rows
from app.scoring.comparison import compare
from app.scoring.oracle import run_oracle
from app.scoring.policy import Thresholds
from app.scoring.registry import ModelRegistry
from app.settings import Settings
from app.watch.samples import parse
from tests.support.live import StartActionService, StartWorker, metrics_page, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHADOW_REDIS_DB = 11
CANDIDATE = "mlp-shadow-candidate"


def _cli(settings: Settings, *args: str) -> str:
    done = run_cli(settings, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _oracle_actions(settings: Settings, lines: list[bytes], version: str,
                    thresholds: Thresholds | None = None
                    ) -> tuple[set[tuple[str, str]], set[str]]:
    """`fraudstream score` with `version` (and `thresholds`, else its card's): its actions as
    (txn_id, type), and their keys."""

    registry = ModelRegistry(settings.model_dir, device="cpu")
    run = run_oracle(lines, registry, version=version, explain=False, thresholds=thresholds,
                     allowed_lateness_ms=settings.allowed_lateness_ms,
                     now_ms=time.time_ns() // 1_000_000)
    return {(a.txn_id, a.type) for a in run.actions}, {a.idempotency_key for a in run.actions}


def test_shadow_never_acts_and_compare_lists_exactly_the_differing_actions(
        fresh_settings: Settings, tmp_path: Path, start_action_service: StartActionService,
        start_worker: StartWorker) -> None:
    require_compiled_fold()
    models = tmp_path / "models"
    # the candidate's card has thresholds of its own, and the active model's freeze threshold
    # is overridden (FRAUDSTREAM_FREEZE_THRESHOLD): each side decides under its own policy
    own = {"freeze": 0.2, "alert": 0.1}
    base = add_shifted_version(fresh_settings.model_dir, models, CANDIDATE, thresholds=own)
    active_card = ModelRegistry(models, device="cpu").card(base)
    override = round(active_card.thresholds.freeze * 1.5, 6)
    settings = with_own_service(fresh_settings, SHADOW_REDIS_DB).replace(
        model_dir=models, freeze_threshold=override)
    active_policy = active_card.thresholds.override(freeze=override)
    # through the command, before the worker starts: the worker picks it up from the topic
    said = _cli(settings, "model", "shadow", "--model", CANDIDATE)
    assert f"shadowing {CANDIDATE}" in said
    log = make_log(cards=400, txns=8000, days=3, seed=31, redelivery=0.01)
    lines = lines_of(log)
    service = start_action_service(settings)
    worker = start_worker(settings)
    replay_and_settle(settings, [worker], lines, timeout_s=300)
    worker.stop()
    service.stop()

    active, active_keys = _oracle_actions(settings, lines, base, active_policy)
    candidate, _ = _oracle_actions(settings, lines, CANDIDATE)  # its card's own thresholds
    plain, _ = _oracle_actions(settings, lines, CANDIDATE, active_policy)
    assert candidate != plain, "the candidate's own thresholds must matter in this log"
    expected = active ^ candidate
    assert expected, "the candidate must decide some transactions differently"
    # the ledger holds the active model's effects only, each once: the shadow acted on nothing
    ledger = effects(settings.effective_redis_url)
    assert sorted(e["idempotency_key"] for e in ledger) == sorted(active_keys)

    rows = list(iter_shadow_rows(settings, settings.topic(topics.FEATURES_SHADOW)))
    accepted = len({r.txn_id for r in rows})
    assert accepted == log.counts.transactions - log.counts.late
    assert {r.shadow_version for r in rows} == {CANDIDATE}
    assert {r.active_version for r in rows} == {base}
    result = compare(rows)
    assert {(d.txn_id, d.type) for d in result.differing} == expected
    assert {(d.txn_id, d.type) for d in result.differing if d.by == "shadow"} == candidate - active
    assert result.correlation is not None and result.correlation > 0.9

    out = tmp_path / "differing.jsonl"
    labels = tmp_path / "labels.jsonl"
    write_labels(log, labels)
    shown = _cli(settings, "model", "compare", "--out", str(out), "--labels", str(labels))
    assert f"{len(expected):,} actions would differ" in shown
    assert shown.count("freeze precision") == 2  # both models, against the labels
    listed = {(d["txn_id"], d["type"]) for d in map(orjson.loads, out.read_bytes().splitlines())}
    assert listed == expected

    _cli(settings, "model", "shadow", "--stop")


def _shadow_changes(port: int, result: str) -> float:
    return parse([metrics_page(port)]).total("fraudstream_shadow_models_total", result=result)


def test_a_running_worker_starts_and_stops_shadowing_between_batches(
        fresh_settings: Settings, tmp_path: Path, start_worker: StartWorker) -> None:
    models = tmp_path / "models"
    add_shifted_version(fresh_settings.model_dir, models, CANDIDATE)
    settings = fresh_settings.replace(model_dir=models)
    lines = lines_of(make_log(cards=200, txns=3000, days=2, seed=32))
    first, second, third = lines[:1000], lines[1000:2000], lines[2000:]
    ids = [{orjson.loads(line)["txn_id"] for line in part} for part in (first, second, third)]
    worker = start_worker(settings, dispatch=False)
    assert worker.port is not None
    sent = replay(settings, first)
    wait_drained(settings, [worker], expected=sent)
    _cli(settings, "model", "shadow", "--model", CANDIDATE)
    wait_until(lambda: _shadow_changes(worker.port, "accepted") == 1, timeout_s=60,
               what="the worker to accept the shadow model")
    sent += replay(settings, second)
    wait_drained(settings, [worker], expected=sent)
    _cli(settings, "model", "shadow", "--stop")
    wait_until(lambda: _shadow_changes(worker.port, "stopped") == 1, timeout_s=60,
               what="the worker to stop shadowing")
    sent += replay(settings, third)
    wait_drained(settings, [worker], expected=sent)
    worker.stop()
    shadowed = {r.txn_id for r in iter_shadow_rows(settings,
                                                   settings.topic(topics.FEATURES_SHADOW))}
    assert shadowed == ids[1]
