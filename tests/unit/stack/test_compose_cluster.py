"""docker-compose.yml's opt-in `cluster` profile: the topology `stack up --profile cluster` runs."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import yaml

from app.settings import KAFKA_CLUSTER_NODES, Settings, load_settings
from app.stack.kafka_cluster import MIN_INSYNC_REPLICAS

ROOT = Path(__file__).resolve().parents[3]
SETTINGS_VARS = {f.metadata["env"] for f in dataclasses.fields(Settings)}
KAFKA = [f"kafka-{i}" for i in range(1, KAFKA_CLUSTER_NODES + 1)]
REDIS = [f"redis-node-{i}" for i in range(1, 7)]
APPS = ["topics-cluster", "worker-cluster", "action-service-cluster"]


def _services() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def test_cluster_services_are_opt_in_and_the_default_ones_unchanged() -> None:
    services = _services()
    cluster = {n for n, s in services.items() if "profiles" in s}
    assert cluster == {*KAFKA, *REDIS, "redis-cluster-init", *APPS}
    assert all(services[n]["profiles"] == ["cluster"] for n in cluster)
    # the default services carry no profile, so `docker compose up` is what it was
    assert {"kafka", "redis", "topics", "worker", "action-service"} <= set(services) - cluster


def test_three_kraft_nodes_one_quorum_replication_three() -> None:
    services = _services()
    envs = [services[n]["environment"] for n in KAFKA]
    assert {e["KAFKA_NODE_ID"] for e in envs} == {"1", "2", "3"}
    voters = {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs}
    assert voters == {"1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"}
    ids = {e["CLUSTER_ID"] for e in envs}
    assert len(ids) == 1
    assert len(base64.urlsafe_b64decode(ids.pop() + "==")) == 16  # a KRaft cluster id: 16 bytes
    for name, env in zip(KAFKA, envs, strict=True):
        assert services[name]["image"] == services["kafka"]["image"]  # apache/kafka, one version
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == str(KAFKA_CLUSTER_NODES)
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == str(MIN_INSYNC_REPLICAS)
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == str(KAFKA_CLUSTER_NODES)
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == str(KAFKA_CLUSTER_NODES)
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == str(MIN_INSYNC_REPLICAS)
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    volumes = [v for n in KAFKA for v in services[n]["volumes"]]
    assert len(set(volumes)) == len(KAFKA)  # a data volume each


def test_six_redis_nodes_and_a_one_shot_cluster_create() -> None:
    services = _services()
    for name in REDIS:
        cmd = services[name]["command"]
        assert cmd[cmd.index("--cluster-enabled") + 1] == "yes"
        assert cmd[cmd.index("--appendfsync") + 1] == load_settings({}).redis_appendfsync
    init = services["redis-cluster-init"]
    assert init["restart"] == "no"
    script = " ".join(init["command"])
    assert "--cluster create" in script and "--cluster-replicas 1" in script
    assert "for n in 1 2 3 4 5 6" in script
    assert set(init["depends_on"]) == set(REDIS)
    assert all(d["condition"] == "service_healthy" for d in init["depends_on"].values())


def test_app_services_point_at_the_whole_cluster() -> None:
    services = _services()
    for name in APPS:
        env = services[name]["environment"]
        assert set(env) <= SETTINGS_VARS, f"{name} sets variables the app does not read"
        settings = load_settings({k: str(v) for k, v in env.items()})
        assert settings.profile == "cluster" and settings.replication == KAFKA_CLUSTER_NODES
        assert settings.kafka_bootstrap == ",".join(f"{n}:9092" for n in KAFKA)
        assert settings.redis_url == "redis+cluster://redis-node-1:6379"
    worker = services["worker-cluster"]["depends_on"]
    assert worker["redis-cluster-init"]["condition"] == "service_completed_successfully"
    assert worker["topics-cluster"]["condition"] == "service_completed_successfully"
    assert set(services["topics-cluster"]["depends_on"]) == set(KAFKA)
    # the cluster's action service does not take the single-node one's host port
    assert services["action-service-cluster"]["ports"] != services["action-service"]["ports"]
