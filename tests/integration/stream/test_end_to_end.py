"""Features end to end: served values equal the offline recomputation, value for value."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.features.offline import compute_features
from app.harness.pipeline import (
    assert_live_matches_oracle,
    audit_served,
    lines_of,
    make_log,
    replay,
    served_rows,
    wait_drained,
)
from app.harness.procs import source_reads, wait_all_assigned, wait_until
from app.kafka import topics
from app.kafka.inspect import topic_sizes
from app.settings import Settings
from tests.support.live import StartWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_workers_50k_events_zero_skew_and_oracle_actions(
    fresh_settings: Settings, start_worker: StartWorker
) -> None:
    """The acceptance run of the features and scoring issues: 50k events, 2 workers."""
    log = make_log(cards=3000, txns=50_000, seed=21, out_of_order=0.02, redelivery=0.01,
                   malformed=0.002)
    lines = lines_of(log)
    workers = [start_worker(fresh_settings, name=f"w{i}", dispatch=False) for i in range(2)]
    source = fresh_settings.topic(topics.TRANSACTIONS)
    # both workers in the group before the log goes in (one alone would read all of it
    # before the other joined: 50k events take it about two seconds)
    wait_all_assigned(workers, source)
    sent = replay(fresh_settings, lines)
    wait_drained(fresh_settings, workers, expected=sent, timeout_s=300)
    # every source partition is owned by one worker, which has read it (/debug/consumer)
    owned = {tp: read for w in workers for tp, read in source_reads(w, source).items()}
    assert len(owned) == fresh_settings.topic_partitions
    assert all(read is not None and read > 0 for read in owned.values()), owned
    # the light page (a per-second probe's) leaves out the pass over the cached cards
    full, light = workers[0].debug("consumer"), workers[0].debug("consumer?light=1")
    assert full["cards"]["cached_events"] > 0 and light["cards"]["cached_events"] is None
    assert light["cards"]["cached"] == full["cards"]["cached"] > 0
    for w in workers:
        w.stop()
    report = audit_served(fresh_settings, lines)
    assert report.ok, report.render()
    assert report.compared >= 50_000 - log.counts.late
    assert report.mismatched_rows == 0 and not report.never_served
    # live actions for the replayed log equal `fraudstream score` offline
    assert assert_live_matches_oracle(fresh_settings, lines) > 100


def test_worker_killed_mid_replay_resumes_from_changelog(
    fresh_settings: Settings, start_worker: StartWorker
) -> None:
    log = make_log(cards=1500, txns=30_000, seed=22, out_of_order=0.02, redelivery=0.01)
    lines = lines_of(log)
    served_topic = fresh_settings.topic(topics.FEATURES_SERVED)
    worker = start_worker(fresh_settings, name="first", dispatch=False)
    sent = replay(fresh_settings, lines)
    wait_until(lambda: asyncio.run(topic_sizes(fresh_settings, [served_topic]))[served_topic]
               > 8_000, timeout_s=120, what="the worker to be well into the log")
    worker.kill()  # SIGKILL: no clean shutdown, no final commit
    worker = start_worker(fresh_settings, name="second", dispatch=False)
    wait_drained(fresh_settings, [worker], expected=sent, timeout_s=300)
    worker.stop()
    rows = served_rows(fresh_settings)
    report = audit_served(fresh_settings, lines)
    assert report.ok, report.render()
    # the kill made the new worker re-read uncommitted input that the changelog already held:
    # those events were served again as redeliveries, with their first features (audit above)
    redelivered = sum(1 for r in rows if r["redelivered"])
    assert redelivered > compute_features(
        lines, allowed_lateness_ms=fresh_settings.allowed_lateness_ms,
        now_ms=time.time_ns() // 1_000_000).redelivered
