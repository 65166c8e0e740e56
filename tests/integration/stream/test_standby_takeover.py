"""Standby replicas on the real stack: a worker that kept another's partitions warm takes them
over, when that one is SIGKILLed, restoring about nothing, and serves them exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.harness.pipeline import audit_served, lines_of, make_log, replay, wait_drained
from app.harness.procs import source_reads, spawn_worker, wait_all_assigned, wait_until
from app.kafka import topics
from app.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _cards_page(worker: object) -> dict[str, object]:
    return worker.debug("consumer")["cards"]  # type: ignore[attr-defined]


def test_a_warm_standby_takes_over_restoring_about_nothing(fresh_settings: Settings,
                                                           tmp_path: Path) -> None:
    settings = fresh_settings
    assert settings.standby_replicas >= 1
    source = settings.topic(topics.TRANSACTIONS)
    lines = lines_of(make_log(cards=400, txns=6_000, seed=57))
    half = len(lines) // 2
    a = spawn_worker(settings, tmp_path, name="a", dispatch=False)
    b = spawn_worker(settings, tmp_path, name="b", dispatch=False)
    try:
        wait_all_assigned([a, b], source)
        sent = replay(settings, lines[:half])
        wait_drained(settings, [a, b], expected=sent, timeout_s=240)
        # b's standbys (a's partitions) have read the changelog to its end
        wait_until(lambda: _cards_page(b)["standby_lag"] == 0, timeout_s=120,
                   what="b's standby partitions to catch up")
        page = _cards_page(b)
        standbys = {int(tp.rsplit(":", 1)[1]) for tp in page["standbys"]}  # type: ignore[attr-defined]
        before = dict(page["restored_by_partition"])  # type: ignore[arg-type]
        theirs = {int(tp.rsplit(":", 1)[1]) for tp in source_reads(a, source)}
        assert theirs, "a owns nothing"
        a.kill()
        wait_until(lambda: {int(tp.rsplit(":", 1)[1]) for tp in source_reads(b, source)}
                   >= theirs, timeout_s=120, what="b to take over a's partitions")
        after = dict(_cards_page(b)["restored_by_partition"])  # type: ignore[arg-type]
        sent += replay(settings, lines[half:])
        wait_drained(settings, [b], expected=sent, timeout_s=240)
    finally:
        a.stop()
        b.stop()
    restored = {p: after.get(p, 0) - before.get(p, 0) for p in map(str, theirs)}
    # caught up before the kill, nothing written since to a's partitions but by a in its last
    # moments (the log had been drained): a full restore would read every record of them
    assert sum(restored.values()) <= 50, f"b restored {restored} taking over warm standbys"
    assert theirs <= standbys, f"b kept {standbys} warm, a owned {theirs}"
    report = audit_served(settings, lines)
    assert report.ok, report.render()
    assert report.compared >= len(lines) * 0.9 and report.mismatched_rows == 0
