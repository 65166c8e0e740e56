"""`fraudstream backtest` with the active policy (a thresholds override included) reproduces
exactly the actions the live pipeline emitted for the same messy log (out-of-order, late,
redelivered and malformed lines), with the same allow/block lists (set and read back through
`fraudstream lists`); a stricter policy shows fewer freezes and lists the diff."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.datagen.writer import write_log
from app.harness.pipeline import (
    label_records,
    lines_of,
    live_actions,
    make_log,
    replay_and_settle,
    require_compiled_fold,
    send_label_records,
    with_own_service,
)
from app.harness.procs import wait_until
from app.scoring.registry import ModelRegistry
from app.settings import Settings
from tests.support.live import StartActionService, StartWorker, run_cli

pytestmark = pytest.mark.integration


def test_backtest_reproduces_the_live_actions(fresh_settings: Settings, tmp_path: Path,
                                              start_action_service: StartActionService,
                                              start_worker: StartWorker) -> None:
    require_compiled_fold()
    # the active policy: the card's thresholds with the freeze one overridden (worker and
    # backtest both read FRAUDSTREAM_FREEZE_THRESHOLD); a messy log: out-of-order, late,
    # redelivered and malformed lines, as a producer's log is
    settings = with_own_service(fresh_settings, redis_db=11).replace(freeze_threshold=0.5)
    log = make_log(cards=300, txns=6000, seed=32, out_of_order=0.03, redelivery=0.02,
                   malformed=0.01)
    events, labels = tmp_path / "log.jsonl", tmp_path / "log.labels.jsonl"
    write_log(log, events, labels)
    lines = lines_of(log)
    blocked = orjson.loads(lines[0])["card_id"]
    # the labels the backtest reads were on the labels topic as the worker scored (its merchant
    # features come from them)
    send_label_records(settings, label_records(log))

    service = start_action_service(settings)
    worker = start_worker(settings)
    bad = run_cli(settings, "lists", "add", "block", "card", "c 1", "--reason", "mule")
    assert bad.returncode == 1 and "422" in bad.stderr and "(field: id)" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    added = run_cli(settings, "lists", "add", "block", "card", blocked, "--reason", "mule")
    assert added.returncode == 0, added.stderr
    assert f"card {blocked} is on the block list" in added.stdout
    shown = run_cli(settings, "lists", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    lists_file = tmp_path / "lists.jsonl"
    lists_file.write_text(shown.stdout)
    assert [orjson.loads(x)["id"] for x in shown.stdout.splitlines()] == [blocked]
    # the worker applies the entry from the batch after it read it: wait for it
    wait_until(lambda: b'fraudstream_list_entries{list="block"} 1.0' in _metrics(worker.port),
               timeout_s=120, what="the worker to read the block entry")

    replay_and_settle(settings, [worker], lines)
    worker.stop()
    service.stop()

    out, diff, strict = tmp_path / "bt.jsonl", tmp_path / "diff.jsonl", tmp_path / "strict.json"
    strict.write_text('{"freeze": 0.97}')
    result = run_cli(settings, "backtest", "--events", str(events), "--labels", str(labels),
                     "--lists", str(lists_file), "--policy", str(strict),
                     "--out-actions", str(out), "--diff-out", str(diff))
    assert result.returncode == 0, result.stderr
    offline = {a["idempotency_key"]: a for a in map(orjson.loads, out.read_bytes().splitlines())}
    live = live_actions(settings)
    assert set(live) == set(offline) and offline
    for key, copies in live.items():
        expected = offline[key]
        for action in copies:
            assert {f: action.get(f) for f in ("type", "card_id", "txn_id", "ts_ms",
                                               "decided_by", "rule")} == {
                f: expected.get(f) for f in ("type", "card_id", "txn_id", "ts_ms",
                                             "decided_by", "rule")}, key
            assert abs(action["score"] - expected["score"]) <= 1e-5
    assert any(a["decided_by"] == "block_list" for a in offline.values())
    # the override decided: freezes between the card's threshold and 0.5 became alerts
    card = ModelRegistry(settings.model_dir, device="cpu").load(settings.model_version)
    assert card.thresholds.freeze < 0.5
    model = [a for a in offline.values() if a["decided_by"] == "model"]
    assert all(a["score"] >= 0.5 for a in model if a["type"] == "freeze_card")
    assert any(a["type"] == "alert_customer" and a["score"] >= card.thresholds.freeze
               for a in model)

    # the stricter policy freezes less, and the diff is the freezes it no longer makes
    changes = [orjson.loads(x) for x in diff.read_bytes().splitlines()]
    freezes = [x for x in result.stdout.splitlines() if x.strip().startswith("freezes")]
    active_n, candidate_n = (int(v.replace(",", "")) for v in freezes[0].split()[1:3])
    assert candidate_n < active_n
    removed = [c for c in changes if c["change"] == "removed"]
    assert len(removed) == active_n - candidate_n + sum(
        1 for c in changes if c["change"] == "added" and c["type"] == "freeze_card")
    assert all(c["type"] == "freeze_card" and c["decided_by"] == "model" for c in removed)


def _metrics(port: int) -> bytes:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:  # noqa: S310
            return resp.read()
    except OSError:
        return b""
