"""deploy/: the dashboard and provisioning parse, match docker-compose.yml, and query only what
the processes declare (in-process registries here; the live check is in tests/integration)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.support import dashboard as dash

ROOT = dash.ROOT
DEPLOY = ROOT / "deploy"


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def board() -> dict:
    return dash.load()


@pytest.fixture(scope="module")
def compose() -> dict:
    return _yaml(ROOT / "docker-compose.yml")


@pytest.mark.parametrize(("expr", "names"), [
    ("sum(rate(fraudstream_scored_total[1m]))", {"fraudstream_scored_total"}),
    ('histogram_quantile(0.99, sum by (hop, le) (rate(fraudstream_hop_seconds_bucket'
     '{hop="model"}[$__rate_interval])))', {"fraudstream_hop_seconds_bucket"}),
    ('a_total{x="sum(b)", y=~"c|d"} + on (job) group_left (z) e_count offset 5m',
     {"a_total", "e_count"}),
    ("sum(x) or vector(0)", {"x"}),
    ('count by (model_version, provider) (m_info == 1) > bool 0', {"m_info"}),
    ('{__name__="named_metric", job="w"} / ignoring(le) 1e3', {"named_metric"}),
    ("max without (instance) (g) unless h @ end()", {"g", "h"}),
    ('q{topic="$topic"} * 2', {"q"}),
])
def test_metric_names_of_promql(expr: str, names: set[str]) -> None:
    assert dash.metric_names(expr) == names


def test_a_name_pattern_cannot_be_checked() -> None:
    with pytest.raises(dash.PromQLNameError):
        dash.metric_names('{__name__=~"fraudstream_.*"}')


def test_label_values_takes_the_selector_only() -> None:
    assert dash.variable_query_names("label_values(kafka_consumergroup_lag{topic=\"t\"}, "
                                     "consumergroup)") == {"kafka_consumergroup_lag"}
    assert dash.variable_query_names("label_values(topic)") == set()


def test_every_panel_has_a_query_and_a_place(board: dict) -> None:
    panels = list(dash.panels(board))
    assert len(panels) >= 10
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["title"] and panel["type"] in {"stat", "timeseries", "table", "bargauge"}
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert dash.metric_names(target["expr"]), (panel["title"], target["expr"])
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


def test_provisioning_points_at_compose(board: dict, compose: dict) -> None:
    sources = _yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")["datasources"]
    (source,) = sources
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    uids = {t["datasource"]["uid"] for p in dash.panels(board) for t in p["targets"]}
    uids |= {p["datasource"]["uid"] for p in dash.panels(board)}
    assert uids == {source["uid"]}

    (provider,) = _yaml(DEPLOY / "grafana/provisioning/dashboards/fraudstream.yml")["providers"]
    grafana = compose["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"]
                  if v.startswith("./"))
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{dash.DASHBOARD.name}"
    prometheus = compose["services"]["prometheus"]
    assert any(v.startswith("./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml")
               for v in prometheus["volumes"])


def test_scrape_targets_are_the_compose_services(compose: dict) -> None:
    jobs = {j["job_name"]: j for j in _yaml(DEPLOY / "prometheus/prometheus.yml")
            ["scrape_configs"]}
    services = compose["services"]
    # the worker's --metrics-listen port, found per replica by the service's DNS name
    (sd,) = jobs["fraudstream-worker"]["dns_sd_configs"]
    command = services["worker"]["command"]
    listen = command[command.index("--metrics-listen") + 1]
    assert sd["names"] == ["worker"] and listen == f"0.0.0.0:{sd['port']}"
    (static,) = jobs["action-service"]["static_configs"]
    service_cmd = services["action-service"]["command"]
    assert static["targets"] == [f"action-service:{service_cmd[service_cmd.index('--port') + 1]}"]
    (quality,) = jobs["quality"]["static_configs"]
    quality_cmd = services["quality"]["command"]
    assert quality["targets"] == [f"quality:{quality_cmd[quality_cmd.index('--port') + 1]}"]
    assert jobs["kafka-exporter"]["static_configs"][0]["targets"] == ["kafka-exporter:9308"]
    assert "kafka-exporter" in services
    # the dashboard's `up{job=...}` names a job that exists
    for expr in (t["expr"] for p in dash.panels(dash.load()) for t in p["targets"]):
        for job in re.findall(r'job="([^"]+)"', expr):
            assert job in jobs, expr


def _in_process_pages() -> list[str]:
    """The worker's page and the action service's, built here (no network)."""
    import app.stream.metrics  # noqa: F401 - registers the worker's collectors
    from app.action_service.metrics import ServiceMetrics
    from app.scoring.metrics import PrometheusScorerMetrics
    from app.stream.pages import metrics_page

    PrometheusScorerMetrics()
    return [metrics_page().decode(), ServiceMetrics().exposition().decode(), _quality_page()]


def _quality_page() -> str:
    """`fraudstream quality`'s registry (its collector over an empty book: every family)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from app.quality.book import QualityBook
    from app.quality.exporter import QualityCollector
    from app.quality.feed import QualityFeed
    from app.settings import load_settings

    collector = QualityCollector(QualityFeed(load_settings({}), QualityBook()))
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_every_queried_metric_is_declared(board: dict) -> None:
    queried = dash.queried_names(board)
    assert dash.missing(queried, _in_process_pages()) == set(), queried
    kafka = {n for n in queried if n.startswith("kafka_")}
    assert kafka <= dash.KAFKA_EXPORTER


def test_every_rule_reads_declared_or_recorded_metrics(compose: dict) -> None:
    queried = dash.rule_queried_names()
    assert "fraudstream_drift_feature_count" in queried
    assert dash.missing(queried, _in_process_pages()) == set(), queried
    for rule in dash.rules():
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule
    # prometheus.yml loads the files where docker-compose.yml mounts them
    (pattern,) = _yaml(DEPLOY / "prometheus/prometheus.yml")["rule_files"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1)
                  for v in compose["services"]["prometheus"]["volumes"] if v.startswith("./"))
    assert pattern == f"{mounts['./deploy/prometheus/rules']}/*.yml"


def test_drift_is_recorded_alerted_and_shown_with_the_settings_thresholds(board: dict) -> None:
    from app.settings import Settings

    recorded = dash.recorded_names()
    assert {"fraudstream:feature_psi", "fraudstream:score_psi"} <= recorded
    alerts = {r["alert"]: r["expr"] for r in dash.rules() if "alert" in r}
    defaults = Settings()
    assert f">= {defaults.drift_psi_alert}" in alerts["FraudstreamScoreDrift"]
    assert f">= {defaults.drift_psi_alert}" in alerts["FraudstreamFeatureDrift"]
    assert f">= {defaults.drift_psi_watch}" in alerts["FraudstreamFeatureDriftWatch"]
    drift = [p for p in dash.panels(board) if "PSI" in p["title"]]
    assert len(drift) >= 3
    for panel in drift:
        steps = {s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]}
        assert {defaults.drift_psi_watch, defaults.drift_psi_alert} <= steps, panel["title"]


def test_a_renamed_metric_is_caught() -> None:
    pages = _in_process_pages()
    assert dash.missing({"fraudstream_scored_total"}, pages) == set()
    assert dash.missing({"fraudstream_scored"}, pages) == {"fraudstream_scored"}
    assert dash.missing({"fraudstream_hop_seconds_total"}, pages) == \
        {"fraudstream_hop_seconds_total"}
    assert dash.missing({"kafka_consumergroup_lags"}, pages) == {"kafka_consumergroup_lags"}


def test_the_dashboard_shows_what_watch_reads(board: dict) -> None:
    source = (ROOT / "app/watch/frame.py").read_text()
    read = set(re.findall(r'"((?:fraudstream|action_service)_[a-z_]+)"', source))
    assert read, "no metric names found in app/watch/frame.py"
    queried = set(dash.queried_names(board))
    # a histogram is read through its buckets
    missing = {n for n in read if n not in queried and f"{n}_bucket" not in queried}
    assert missing == set()
    # the two things watch takes from Kafka: end offsets (in) and the group's lag
    assert {"kafka_topic_partition_current_offset", "kafka_consumergroup_lag"} <= queried


def test_the_dashboard_shows_the_latency_budget(board: dict) -> None:
    """p99 event → served against 50 ms and the share of events within it, as watch shows."""
    exprs = [t["expr"] for p in dash.panels(board) for t in p.get("targets", [])]
    assert any('hop="event_to_served"' in e and e.startswith("histogram_quantile(0.99")
               for e in exprs)
    assert any('le="0.05"' in e and 'fraudstream_hop_seconds_count{hop="event_to_served"}' in e
               for e in exprs)
    budget = [p for p in dash.panels(board) if "budget" in p.get("title", "")]
    steps = [s["value"] for p in budget
             for s in p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {})
             .get("steps", []) if s["value"] is not None]
    assert 0.05 in steps
