"""exactly_once end to end: a worker SIGKILLed mid-stream leaves no committed duplicate."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import orjson
import pytest

from app.harness.pipeline import (
    assert_live_matches_oracle,
    audit_served,
    lines_of,
    make_log,
    read,
    replay,
    wait_drained,
)
from app.harness.procs import kill_with_reads_uncommitted, wait_all_assigned, wait_until
from app.kafka import topics
from app.kafka.inspect import read_topic, topic_sizes
from app.settings import Settings
from tests.support.live import StartWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def committed_served_rows(settings: Settings) -> list[dict[str, object]]:
    """features.served read read_committed (the settings' processing is exactly_once)."""
    assert settings.isolation_level == "read_committed"
    return [orjson.loads(r.value) for r in read(settings, topics.FEATURES_SERVED)]


def test_a_worker_sigkilled_mid_stream_leaves_no_committed_duplicate(
    fresh_settings: Settings, start_worker: StartWorker
) -> None:
    settings = fresh_settings.replace(processing="exactly_once")
    log = make_log(cards=1500, txns=30_000, seed=29, out_of_order=0.02, redelivery=0.01,
                   malformed=0.002)
    lines = lines_of(log)
    served_topic = settings.topic(topics.FEATURES_SERVED)
    source = settings.topic(topics.TRANSACTIONS)
    workers = [start_worker(settings, name=f"w{i}", dispatch=False) for i in range(2)]
    wait_all_assigned(workers, source)
    # fed at a pace the workers keep up with (10 s): they hold read, uncommitted work at
    # any moment of it. A log replayed at once was read whole within a second and its
    # share processed in a few, so the kill could come after the victim had committed all.
    fed: list[int] = []
    feeder = threading.Thread(target=lambda: fed.append(replay(settings, lines, rate=3_000)))
    feeder.start()
    wait_until(lambda: asyncio.run(topic_sizes(settings, [served_topic]))[served_topic]
               > 8_000, timeout_s=120, what="the workers to be well into the log")
    # SIGKILL while it holds read messages in open transactions (neither committed nor
    # aborted): the partitions' next owner must abort them and redo that work
    kill_with_reads_uncommitted(settings, workers[0], source,
                                open_in=served_topic)
    feeder.join(timeout=120)
    assert fed, "the replay did not finish"
    sent = fed[0]
    workers.append(start_worker(settings, name="w2", dispatch=False))
    wait_drained(settings, workers[1:], expected=sent, timeout_s=300)
    for w in workers:
        w.stop()
    rows = committed_served_rows(settings)
    positions = Counter((r["partition"], r["offset"]) for r in rows)
    twice = [p for p, n in positions.items() if n > 1]
    assert not twice, f"{len(twice)} source messages served twice under read_committed"
    # nothing read again was served again: the restored state and the offsets were one commit
    assert not [r for r in rows if r["redelivered"] and (r["partition"], r["offset"]) in twice]
    report = audit_served(settings, lines)
    assert report.ok, report.render()
    assert report.mismatched_rows == 0 and not report.never_served
    # an action per served row that decided one: a transaction the log itself sends twice is
    # served twice (two source messages, the second marked redelivered), and so actioned twice
    served_per_txn = Counter(r["txn_id"] for r in rows)
    actions = [orjson.loads(r.value) for r in read(settings, topics.ACTIONS)]
    per_key = Counter(a["idempotency_key"] for a in actions)
    txn_of = {a["idempotency_key"]: a["txn_id"] for a in actions}
    assert per_key
    wrong = {k: n for k, n in per_key.items() if n != served_per_txn[txn_of[k]]}
    assert not wrong, f"actions committed more often than their transaction was served: {wrong}"
    assert_live_matches_oracle(settings, lines)
    # the kill hit an open transaction with served rows in it (high watermark above the last
    # stable offset at the freeze): those rows were aborted, so a read_uncommitted reader sees
    # strictly more rows than a read_committed one, and the committed ones hold no duplicate
    uncommitted = asyncio.run(read_topic(settings.replace(processing="at_least_once"),
                                         served_topic, timeout_s=120))
    assert len(uncommitted) > len(rows), (
        f"no aborted row: {len(uncommitted)} rows read uncommitted, {len(rows)} committed")
