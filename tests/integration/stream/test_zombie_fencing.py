"""exactly_once against a zombie: a worker frozen past its session timeout (SIGSTOP) loses its
partitions to another, which fences its transactional ids and commits on; thawed (SIGCONT), the
zombie's open transaction can no longer commit. Nothing is served twice under read_committed,
the group's committed offsets never go backwards, and the zombie says in its log that it was
fenced. (docs/processing.md: per-partition transactional ids exist for exactly this.)"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections import Counter

import orjson
import pytest

from app.harness.pipeline import audit_served, lines_of, make_log, read, replay, wait_drained
from app.harness.procs import source_reads, wait_all_assigned, wait_until
from app.kafka import topics
from app.kafka.inspect import committed_offsets, open_transaction_partitions, topic_sizes
from app.settings import Settings
from tests.support.live import StartWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION_S = 6.0
FENCED = ("ProducerFenced", "InvalidProducerEpoch")


def test_a_zombie_worker_is_fenced_and_serves_nothing_twice(fresh_settings: Settings,
                                                             start_worker: StartWorker) -> None:
    settings = fresh_settings.replace(processing="exactly_once", session_timeout_s=SESSION_S)
    log = make_log(cards=800, txns=16_000, seed=43)
    lines = lines_of(log)
    source = settings.topic(topics.TRANSACTIONS)
    served = settings.topic(topics.FEATURES_SERVED)
    zombie, other = (start_worker(settings, name=f"w{i}", dispatch=False) for i in range(2))
    seen: list[dict[str, int]] = []  # the group's committed offsets, sampled
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                seen.append(asyncio.run(committed_offsets(settings, settings.app_id, source)))
            except Exception:  # noqa: BLE001 - a sample lost is a sample lost
                pass
            time.sleep(0.3)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        wait_all_assigned([zombie, other], source)
        partitions = len(source_reads(zombie, source)) + len(source_reads(other, source))
        fed: list[int] = []
        feeder = threading.Thread(target=lambda: fed.append(replay(settings, lines, rate=1_600)))
        feeder.start()
        sampler.start()
        wait_until(lambda: asyncio.run(topic_sizes(settings, [served]))[served] > 3_000,
                   timeout_s=120, what="the workers to be into the log")
        # frozen while one of its own transactions holds served rows: a served row goes to the
        # partition of its source (both keyed by card, as many partitions), so an open one on
        # the zombie's partitions is the zombie's (the other's would not make it a zombie with
        # anything to commit: it would wake, rejoin and never try)
        mine = {int(tp.rsplit(":", 1)[1]) for tp in source_reads(zombie, source)}
        for _ in range(200):
            os.kill(zombie.pid, signal.SIGSTOP)
            if mine & set(asyncio.run(open_transaction_partitions(settings, served))):
                break
            os.kill(zombie.pid, signal.SIGCONT)
            time.sleep(0.05)
        else:
            pytest.fail("never froze the zombie with a transaction open")
        frozen_at = time.monotonic()
        # past its session: the other takes every partition, fences, and commits on
        wait_until(lambda: len(source_reads(other, source)) == partitions,
                   timeout_s=60, interval_s=0.5, what="the other worker to own every partition")
        before = asyncio.run(committed_offsets(settings, settings.app_id, source))
        wait_until(lambda: sum(asyncio.run(committed_offsets(settings, settings.app_id,
                                                             source)).values())
                   > sum(before.values()), timeout_s=60, what="the other worker to commit")
        assert time.monotonic() - frozen_at > SESSION_S
        os.kill(zombie.pid, signal.SIGCONT)  # the zombie wakes up with its open transaction
        feeder.join(timeout=120)
        assert fed, "the replay did not finish"
        wait_drained(settings, [other], expected=fed[0], timeout_s=300)
    finally:
        stop.set()
        for w in (zombie, other):
            if w.alive():
                os.kill(w.pid, signal.SIGCONT)
            w.stop()
    rows = [orjson.loads(r.value) for r in read(settings, topics.FEATURES_SERVED)]
    twice = [p for p, n in Counter((r["partition"], r["offset"]) for r in rows).items() if n > 1]
    assert not twice, f"{len(twice)} source messages served twice under read_committed"
    report = audit_served(settings, lines)
    assert report.ok and report.mismatched_rows == 0 and not report.never_served, report.render()
    # committed offsets only move forward, partition by partition
    back = [(tp, a[tp], b[tp]) for a, b in zip(seen, seen[1:], strict=False)
            for tp in a if tp in b and b[tp] < a[tp]]
    assert len(seen) > 10 and not back, f"committed offsets went backwards: {back[:5]}"
    text = zombie.log_path.read_text(errors="replace")
    assert any(word in text for word in FENCED), "the zombie did not log that it was fenced"
