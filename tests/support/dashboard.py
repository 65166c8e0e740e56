"""The Grafana dashboard's queries, the metric names in them, and what a /metrics page exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "fraudstream.json"
#: Prometheus rule files (docker-compose.yml mounts them; prometheus.yml loads them).
RULES = ROOT / "deploy" / "prometheus" / "rules"

#: Series that Prometheus makes up itself for every target (not on any /metrics page).
SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped",
                       "scrape_samples_post_metric_relabeling", "scrape_series_added"})

#: What danielqsj/kafka-exporter exports (its README, "Metrics"); docker-compose.yml runs it.
KAFKA_EXPORTER = frozenset({
    "kafka_brokers", "kafka_broker_info", "kafka_topic_partitions",
    "kafka_topic_partition_current_offset", "kafka_topic_partition_oldest_offset",
    "kafka_topic_partition_in_sync_replica", "kafka_topic_partition_leader",
    "kafka_topic_partition_leader_is_preferred", "kafka_topic_partition_replicas",
    "kafka_topic_partition_under_replicated_partition", "kafka_consumergroup_current_offset",
    "kafka_consumergroup_current_offset_sum", "kafka_consumergroup_lag",
    "kafka_consumergroup_lag_sum", "kafka_consumergroup_members",
})

#: The series names each metric type puts on a page, by suffix of the family name, as
#: prometheus_client writes them (its parser gives a counter's family without `_total`).
SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "gauge": ("",),
    "stateset": ("",),
    "unknown": ("",),
}

_KEYWORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                       "group_right", "bool", "offset", "inf", "nan"})
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*(=~|!=|!~|=)\s*"((?:\\.|[^"\\])*)"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_OFFSET = re.compile(r"\boffset\s+-?\w+|@\s*[\w.()]+")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_TOKEN = re.compile(r"\$\{?\w+\}?|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[a-zA-Z_:][a-zA-Z0-9_:]*|\S")
_LABEL_VALUES = re.compile(r"^\s*label_values\s*\(\s*(?:(.*?)\s*,\s*)?\w+\s*\)\s*$", re.S)


class PromQLNameError(ValueError):
    """A query selects metrics by a pattern: its names cannot be checked."""


def metric_names(expr: str) -> set[str]:
    """Every metric name a PromQL expression selects (functions, keywords, labels left out)."""
    names: set[str] = set()
    for op, value in _NAME_MATCHER.findall(expr):
        if op != "=":
            raise PromQLNameError(f"__name__{op} in {expr!r}")
        names.add(value)
    text = _MATCHERS.sub(" ", _STRING.sub('""', expr))
    text = _GROUPING.sub(" ", _OFFSET.sub(" ", _RANGE.sub(" ", text)))
    tokens = _TOKEN.findall(text)
    for i, token in enumerate(tokens):
        if not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", token) or token.lower() in _KEYWORDS:
            continue
        if i + 1 < len(tokens) and tokens[i + 1] == "(":
            continue  # a function or an aggregation
        names.add(token)
    return names


def variable_query_names(query: str) -> set[str]:
    """Metric names of a Grafana variable query (`label_values(selector, label)` or PromQL)."""
    found = _LABEL_VALUES.match(query)
    if found:  # label_values(label) names no metric; label_values(selector, label) does
        return metric_names(found.group(1)) if found.group(1) else set()
    return metric_names(query)


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows included; rows themselves left out."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panels({"panels": panel.get("panels", [])})
        else:
            yield panel


def queried_names(dashboard: dict[str, Any]) -> dict[str, set[str]]:
    """metric name -> titles of the panels (or variables) that query it."""
    where: dict[str, set[str]] = {}
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            for name in metric_names(target["expr"]):
                where.setdefault(name, set()).add(panel["title"])
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        for name in variable_query_names(query):
            where.setdefault(name, set()).add(f"${var['name']}")
    return where


def rules() -> list[dict[str, Any]]:
    """Every recording and alerting rule of the rule files."""
    import yaml

    out: list[dict[str, Any]] = []
    for path in sorted(RULES.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend(group["rules"])
    return out


def recorded_names() -> set[str]:
    """The series the recording rules make (Prometheus computes them: on no page)."""
    return {r["record"] for r in rules() if "record" in r}


def rule_queried_names() -> dict[str, set[str]]:
    """metric name -> the rules whose expression reads it."""
    where: dict[str, set[str]] = {}
    for rule in rules():
        for name in metric_names(rule["expr"]):
            where.setdefault(name, set()).add(f"rule {rule.get('record') or rule['alert']}")
    return where


def exported_names(pages: Iterable[str]) -> set[str]:
    """Every series name the /metrics pages can carry: their samples, and for each declared
    family the names its type gives (a labelled metric with no child yet has no sample)."""
    from prometheus_client.parser import text_string_to_metric_families

    names: set[str] = set()
    for page in pages:
        for family in text_string_to_metric_families(page):
            names.update(sample.name for sample in family.samples)
            names.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
    return names


def missing(queried: Iterable[str], pages: Iterable[str]) -> set[str]:
    """The queried names that neither the pages, kafka-exporter nor Prometheus provide."""
    ours = {n for n in queried if n not in SYNTHETIC and n not in KAFKA_EXPORTER}
    return ours - exported_names(pages) - recorded_names()


def sample_total(page: str, name: str, **labels: str) -> float:
    """The sum of sample `name` on a /metrics page over the samples carrying `labels`
    (prometheus_client's own parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(sample.value for family in text_string_to_metric_families(page)
               for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())
