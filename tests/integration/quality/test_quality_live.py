"""Live quality on the real stack: after replay → worker → actions and `fraudstream labels
--labels FILE`, `fraudstream quality`'s precision and recall per day and label maturity equal an offline
computation over the same log and labels (the backtest's for all labels; a direct count for a
maturity)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from app.datagen.writer import write_log
from app.harness.pipeline import (
    lines_of,
    make_log,
    replay_and_settle,
    require_compiled_fold,
    with_own_service,
)
from app.harness.procs import wait_until
from app.quality.book import DAY_MS
from app.scoring.backtest import Rows, Truth, day_of, evaluate
from app.settings import Settings
from app.transactions.labels import parse_label_row
from tests.support.live import (
    StartActionService,
    StartQuality,
    StartWorker,
    metrics_page,
    offline_run,
    run_cli,
)

pytestmark = pytest.mark.integration

_SAMPLE = re.compile(r'^(fraudstream_quality_\w+)\{day="([\w-]+)",maturity="(\w+)"\} (\S+)$', re.M)


def _scrape(port: int) -> tuple[dict[tuple[str, str, str], float], float]:
    """Every (metric, day, maturity) sample and the count of labels read."""
    try:
        text = metrics_page(port, timeout_s=5)
    except OSError:
        return {}, -1.0
    labels = re.search(r"^fraudstream_quality_labels (\S+)$", text, re.M)
    return ({(m[1], m[2], m[3]): float(m[4]) for m in _SAMPLE.finditer(text)},
            float(labels[1]) if labels else -1.0)


def test_live_precision_and_recall_match_the_offline_computation(
        fresh_settings: Settings, tmp_path: Path, start_action_service: StartActionService,
        start_worker: StartWorker, start_quality: StartQuality) -> None:
    require_compiled_fold()
    settings = with_own_service(fresh_settings, redis_db=12)
    log = make_log(cards=300, txns=6000, seed=33)
    events, labels_path = tmp_path / "log.jsonl", tmp_path / "log.labels.jsonl"
    write_log(log, events, labels_path)
    lines = lines_of(log)
    service = start_action_service(settings)
    worker = start_worker(settings)
    quality = start_quality(settings)
    port = quality.port
    replay_and_settle(settings, [worker], lines)
    ingest = run_cli(settings, "labels", "--labels", str(labels_path))
    assert ingest.returncode == 0, ingest.stderr
    rows = [parse_label_row(orjson.loads(x), now_ms=2**62)
            for x in labels_path.read_bytes().splitlines() if x.strip()]
    wait_until(lambda: _scrape(port)[1] == len({r.label_id for r in rows}), timeout_s=120,
               what="the quality feed to read every label")
    # the figures follow the records within an interval: wait until two scrapes agree
    previous: list[object] = [None]

    def settled() -> dict[tuple[str, str, str], float] | None:
        now = _scrape(port)[0]
        stable = now and now == previous[0]
        previous[0] = now
        return now if stable else None

    live = wait_until(settled, timeout_s=60, interval_s=3.0, what="stable figures")
    quality.stop()
    worker.stop()
    service.stop()

    # offline: the same log through the same features, model and policy; the same labels
    oracle = offline_run(settings, lines, now_ms=log_now(), extra=("merchant_id", "amount_minor"))
    table = oracle.offline.table
    offline_rows = Rows(*(table.column(n).to_pylist() for n in
                          ("txn_id", "card_id", "ts_ms", "amount_minor")), oracle.scores.tolist())
    outcome = evaluate("active", oracle.thresholds, oracle.actions, offline_rows, Truth.of(rows))
    assert outcome.total.fraud > 0 and outcome.total.freezes > 0

    def sample(name: str, day: str, maturity: str = "all") -> float | None:
        """A figure; a day with neither a freeze nor a fraud has no sample (counts 0, no ratio)."""
        found = live.get((f"fraudstream_quality_{name}", day, maturity))
        if found is None and name in ("freezes", "fraud", "fraud_frozen"):
            return 0.0
        return found

    for day, tally in [("all", outcome.total), *outcome.days.items()]:
        assert sample("freezes", day) == tally.freezes, day
        assert sample("fraud", day) == tally.fraud, day
        assert sample("fraud_frozen", day) == tally.fraud_freezes, day
        assert sample("precision", day) == tally.precision, day
        assert sample("recall", day) == tally.recall, day

    # a maturity: only the labels reported within 7 days of their transaction
    ts = dict(zip(offline_rows.txn_id, offline_rows.ts_ms, strict=True))
    within = Truth.of(r for r in rows if r.txn_id in ts and r.reported_at_ms <= ts[r.txn_id]
                      + 7 * DAY_MS)
    week = evaluate("active", oracle.thresholds, oracle.actions, offline_rows, within)
    assert sample("fraud", "all", "7d") == week.total.fraud
    assert sample("recall", "all", "7d") == week.total.recall
    assert week.total.fraud <= outcome.total.fraud
    assert {day_of(t) for t in ts.values()} >= set(outcome.days)


def log_now() -> int:
    import time

    return time.time_ns() // 1_000_000
