"""docker-compose.yml parses and agrees with the app's settings (no Docker engine needed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from app.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[3]
SETTINGS_VARS = {f.metadata["env"] for f in dataclasses.fields(Settings)}


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_present() -> None:
    services = _compose()["services"]
    assert {"kafka", "redis", "worker", "action-service"} <= set(services)


def test_app_services_use_only_known_settings() -> None:
    services = _compose()["services"]
    for name in ("worker", "action-service", "topics"):
        env = services[name]["environment"]
        unknown = set(env) - SETTINGS_VARS
        assert not unknown, f"{name} sets variables the app does not read: {unknown}"
        settings = load_settings({k: str(v) for k, v in env.items()})
        assert settings.kafka_bootstrap == "kafka:9092"
        assert settings.redis_url == "redis://redis:6379/0"


def test_ports_and_addresses_agree() -> None:
    services = _compose()["services"]
    env = services["worker"]["environment"]
    settings = load_settings({k: str(v).split(":-")[-1].rstrip("}") for k, v in env.items()})
    kafka_env = services["kafka"]["environment"]
    assert "PLAINTEXT://kafka:9092" == kafka_env["KAFKA_ADVERTISED_LISTENERS"]
    host, port = settings.kafka_bootstrap.split(":")
    assert host == "kafka" and f":{port}" in kafka_env["KAFKA_LISTENERS"]
    action_port = settings.action_service_port
    assert settings.action_service_url.endswith(f":{action_port}")
    assert f"{action_port}:{action_port}" in services["action-service"]["ports"]
    assert str(action_port) in services["action-service"]["command"]
    # AOF durability as the local stack has it
    assert "--appendonly" in services["redis"]["command"]
    assert services["redis"]["command"][services["redis"]["command"].index("--appendfsync") + 1] \
        == load_settings({}).redis_appendfsync


def test_topic_partitions_allow_scaling() -> None:
    env = _compose()["services"]["worker"]["environment"]
    assert int(env["FRAUDSTREAM_PARTITIONS"]) >= 2
