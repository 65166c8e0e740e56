"""Label-fed merchant features, live: every worker reads the labels topic, serves the offline
values (audit-skew 0 with the labels), whatever card partitions it owns."""

from __future__ import annotations

import asyncio

import pytest

from app.features.declaration import MERCHANT_FEATURE_NAMES
from app.harness.pipeline import (
    assert_live_matches_oracle,
    audit_served,
    label_records,
    lines_of,
    make_log,
    replay,
    send_label_records,
    served_rows,
    wait_drained,
)
from app.harness.procs import wait_all_assigned
from app.kafka import topics
from app.settings import Settings
from tests.support.dashboard import sample_total
from tests.support.live import StartWorker, metrics_page

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_workers_serve_the_label_fed_merchant_features_exactly(
    fresh_settings: Settings, start_worker: StartWorker
) -> None:
    # 21 days: merchant windows end 7 days before each transaction, so two weeks see labels
    log = make_log(cards=800, txns=12_000, days=21, seed=41, merchants=300, out_of_order=0.01,
                   redelivery=0.01)
    lines = lines_of(log)
    labels = label_records(log)
    send_label_records(fresh_settings, labels)  # the label log is in before the transactions
    workers = [start_worker(fresh_settings, name=f"w{i}", dispatch=False) for i in range(2)]
    wait_all_assigned(workers, fresh_settings.topic(topics.TRANSACTIONS))
    sent = replay(fresh_settings, lines)
    wait_drained(fresh_settings, workers, expected=sent, timeout_s=300)
    for w in workers:  # each read the whole label log, not only its partitions' labels
        page = metrics_page(w.port)
        assert sample_total(page, "fraudstream_labels_read_total", kind="folded") == len(
            {rec.label_id for rec in labels})
    for w in workers:
        w.stop()
    rows = served_rows(fresh_settings)
    # the merchant features carry signal here: nonzero on a good share of the rows
    seen = [r for r in rows if r["features"]["merchant_labelled_7d"] > 0]
    assert len(seen) > len(rows) // 3, (len(seen), len(rows))
    assert any(r["features"]["merchant_fraud_share_30d"] > 0 for r in rows)
    assert all(type(r["label_cut_ms"]) is int for r in rows)
    report = audit_served(fresh_settings, lines, labels)
    assert report.ok, report.render()
    assert report.mismatched_rows == 0 and not report.never_served
    # without the labels the offline values differ: the audit sees the merchant features
    blind = audit_served(fresh_settings, lines)
    assert set(blind.mismatches) <= set(MERCHANT_FEATURE_NAMES) and blind.mismatched_rows > 0
    assert assert_live_matches_oracle(fresh_settings, lines, labels) > 10


def test_a_worker_without_a_labels_topic_scores_as_without_labels(
    fresh_settings: Settings, start_worker: StartWorker
) -> None:
    """The labels topic deleted: the feed says so, the cut moves on, nothing waits for ever."""
    from app.kafka.inspect import admin_client

    async def drop_labels() -> None:
        async with admin_client(fresh_settings) as admin:
            await admin.delete_topics([fresh_settings.topic(topics.LABELS)])

    asyncio.run(drop_labels())
    log = make_log(cards=200, txns=2_000, days=3, seed=42)
    lines = lines_of(log)
    worker = start_worker(fresh_settings, name="w", dispatch=False)
    sent = replay(fresh_settings, lines)
    wait_drained(fresh_settings, [worker], expected=sent, timeout_s=120)
    worker.stop()
    report = audit_served(fresh_settings, lines)
    assert report.ok and report.compared > 1_500, report.render()
