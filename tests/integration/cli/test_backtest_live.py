"""`fraudstream backtest` with the active policy reproduces exactly the actions the live pipeline
emitted for the same log, with the same allow/block lists (set and read back through
`fraudstream lists`); a stricter policy shows fewer freezes and lists the diff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from app.datagen.writer import write_log
from app.harness.pipeline import (
    label_records,
    lines_of,
    live_actions,
    make_log,
    replay,
    require_compiled_fold,
    send_label_records,
    wait_dispatched,
    wait_drained,
    with_own_service,
)
from app.harness.procs import (
    http_ready,
    settings_env,
    spawn_action_service,
    spawn_worker,
    wait_until,
)
from app.settings import Settings

pytestmark = pytest.mark.integration


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args], env=settings_env(settings),
                          capture_output=True, text=True, timeout=300, check=False)


def test_backtest_reproduces_the_live_actions(fresh_settings: Settings, tmp_path: Path) -> None:
    require_compiled_fold()
    settings = with_own_service(fresh_settings, redis_db=11)
    log = make_log(cards=300, txns=6000, seed=32)
    events, labels = tmp_path / "log.jsonl", tmp_path / "log.labels.jsonl"
    write_log(log, events, labels)
    lines = lines_of(log)
    blocked = orjson.loads(lines[0])["card_id"]
    # the labels the backtest reads were on the labels topic as the worker scored (its merchant
    # features come from them)
    send_label_records(settings, label_records(log))

    service = spawn_action_service(settings, tmp_path)
    worker = spawn_worker(settings, tmp_path)
    try:
        wait_until(lambda: http_ready(f"{settings.action_service_url}/readyz"), timeout_s=30,
                   what="the action service")
        bad = _cli(settings, "lists", "add", "block", "card", "c 1", "--reason", "mule")
        assert bad.returncode == 1 and "422" in bad.stderr and "(field: id)" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
        added = _cli(settings, "lists", "add", "block", "card", blocked, "--reason", "mule")
        assert added.returncode == 0, added.stderr
        assert f"card {blocked} is on the block list" in added.stdout
        shown = _cli(settings, "lists", "show", "--json")
        assert shown.returncode == 0, shown.stderr
        lists_file = tmp_path / "lists.jsonl"
        lists_file.write_text(shown.stdout)
        assert [orjson.loads(x)["id"] for x in shown.stdout.splitlines()] == [blocked]
        # the worker applies the entry from the batch after it read it: wait for it
        wait_until(lambda: b'fraudstream_list_entries{list="block"} 1.0' in _metrics(worker.port),
                   timeout_s=120, what="the worker to read the block entry")

        sent = replay(settings, lines)
        wait_drained(settings, [worker], expected=sent)
        wait_dispatched(settings)
    finally:
        worker.stop()
        service.stop()

    out, diff, strict = tmp_path / "bt.jsonl", tmp_path / "diff.jsonl", tmp_path / "strict.json"
    strict.write_text('{"freeze": 0.97}')
    result = _cli(settings, "backtest", "--events", str(events), "--labels", str(labels),
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
