"""Every metric the Grafana dashboard queries is on a running worker's or action service's page."""

from __future__ import annotations

import urllib.request

import pytest

from app.harness.pipeline import (
    lines_of,
    make_log,
    replay_and_settle,
    run_counts,
    with_own_service,
)
from app.harness.procs import free_port, http_ready, wait_until
from app.settings import Settings
from tests.support import dashboard as dash
from tests.support.live import StartActionService, StartQuality, StartWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DASHBOARD_REDIS_DB = 8


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
        assert resp.status == 200, url
        return resp.read().decode()


def test_the_dashboard_queries_only_exported_metrics(
        fresh_settings: Settings, start_action_service: StartActionService,
        start_worker: StartWorker, start_quality: StartQuality) -> None:
    settings = with_own_service(fresh_settings, DASHBOARD_REDIS_DB)
    listen = free_port()
    service = start_action_service(settings, port=settings.action_service_port)
    # as docker-compose.yml runs it: Prometheus scrapes --metrics-listen
    worker = start_worker(settings, args=["--metrics-listen", f"127.0.0.1:{listen}"])
    quality = start_quality(settings)
    wait_until(lambda: http_ready(f"http://127.0.0.1:{worker.port}/metrics"), timeout_s=60,
               what="the worker's metrics page")
    log = make_log(cards=40, txns=600, malformed=0.05)
    lines = lines_of(log)
    replay_and_settle(settings, [worker], lines)  # every effect applied before the pages are read
    web_page = _page(f"http://127.0.0.1:{worker.port}/metrics")
    listen_page = _page(f"http://127.0.0.1:{listen}/metrics")
    service_page = _page(f"{settings.action_service_url}/metrics")
    wait_until(lambda: http_ready(f"http://127.0.0.1:{quality.port}/metrics"), timeout_s=60,
               what="the quality page")
    quality_page = _page(f"http://127.0.0.1:{quality.port}/metrics")
    quality.stop(timeout_s=30)
    worker.stop(timeout_s=30)
    service.stop(timeout_s=30)

    queried = {**dash.queried_names(dash.load()), **dash.rule_queried_names()}
    ours = {n for n in queried if n.startswith(("fraudstream_", "action_service_"))}
    assert len(ours) >= 8, queried
    assert dash.missing(queried, [web_page, service_page, quality_page]) == set()
    assert {n for n in queried if n.startswith("kafka_")} <= dash.KAFKA_EXPORTER
    # the scraped listener serves the same families as the web port's /metrics
    assert dash.exported_names([listen_page]) >= {
        n for n in ours if not n.startswith(("action_service_", "fraudstream_quality_"))}
    assert dash.missing(queried, [listen_page, service_page, quality_page]) == set()
    # and they carry data after a run: the panels would not be empty
    for name in ("fraudstream_scored_total", "fraudstream_hop_seconds_bucket",
                 "fraudstream_scorer_provider_info", "fraudstream_dlq_messages_total",
                 "fraudstream_consumer_lag_seconds"):
        assert f"\n{name}" in listen_page or f"\n{name}{{" in listen_page, name

    # and the values are the ones the run produced (topics, ledger, oracle), on both pages
    did = run_counts(settings, lines, malformed=log.counts.malformed)
    for page in (web_page, listen_page):
        assert dash.sample_total(page, "fraudstream_scored_total") == did.scored
        assert dash.sample_total(page, "fraudstream_dlq_messages_total") == did.dead_lettered
        assert dash.sample_total(page, "fraudstream_late_messages_total") == did.late
        assert {t: dash.sample_total(page, "fraudstream_actions_emitted_total", type=t)
                for t in did.actions} == did.actions
        # one event-to-served latency per message taken, dead-lettered ones included
        assert dash.sample_total(page, "fraudstream_hop_seconds_count",
                                 hop="event_to_served") == len(lines)
    assert dash.sample_total(service_page, "action_service_effects_applied_total") == did.effects
