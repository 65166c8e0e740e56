"""10k generated transactions with 2% malformed through real Kafka and a real worker."""

from __future__ import annotations

import time
from collections import Counter

import orjson
import pytest

from app.features.offline import compute_features
from app.harness.pipeline import lines_of, make_log, read, replay, wait_drained
from app.kafka import topics
from app.kafka.records import H_REASON_CODE, H_SOURCE_OFFSET, H_SOURCE_PARTITION
from app.settings import Settings
from tests.support.live import StartWorker

pytestmark = pytest.mark.integration


def test_every_valid_message_served_every_bad_one_dead_lettered(
    fresh_settings: Settings, start_worker: StartWorker
) -> None:
    log = make_log(cards=400, txns=10_000, seed=11, malformed=0.02, out_of_order=0.02,
                   redelivery=0.01)
    lines = lines_of(log)
    counts = log.counts
    expected_code = {bad.raw: bad.code for bad in log.bad_messages}
    # no action service here: a dispatching worker would retry its actions until stopped
    worker = start_worker(fresh_settings, dispatch=False)
    sent = replay(fresh_settings, lines)
    wait_drained(fresh_settings, [worker], expected=sent)
    worker.stop()

    dlq = read(fresh_settings, topics.TRANSACTIONS_DLQ)
    late = read(fresh_settings, topics.TRANSACTIONS_LATE)
    served = read(fresh_settings, topics.FEATURES_SERVED)

    # every malformed message, and nothing else, is dead-lettered with the right reason
    assert len(dlq) == counts.malformed > 150
    assert Counter(r.value for r in dlq) == Counter(bad.raw for bad in log.bad_messages)
    for r in dlq:
        assert r.headers[H_REASON_CODE] == expected_code[r.value], r.value[:80]
        assert r.headers[H_SOURCE_OFFSET].isdigit() and r.headers[H_SOURCE_PARTITION].isdigit()

    # every valid transaction is consumed: served (redeliveries served again) or late, exactly
    # as the offline evaluator of the same log decides (a redelivered late event is late twice)
    offline = compute_features(lines, allowed_lateness_ms=fresh_settings.allowed_lateness_ms,
                               now_ms=time.time_ns() // 1_000_000)
    assert len(late) == offline.late >= counts.late > 0
    assert len(served) == offline.accepted + offline.redelivered
    assert offline.accepted == offline.table.num_rows == counts.transactions - counts.late
    assert len(served) + len(late) + len(dlq) == sent == len(lines)
    served_ids = {orjson.loads(r.value)["txn_id"] for r in served}
    late_ids = {orjson.loads(r.value)["txn_id"] for r in late}
    assert len(served_ids | late_ids) == counts.transactions
