"""Settings come from the environment, typed, validated and documented."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.settings import Settings, describe_settings, load_settings


def test_defaults_without_environment() -> None:
    s = load_settings({})
    assert s.kafka_bootstrap is None and s.redis_url is None
    assert s.effective_kafka_bootstrap == f"127.0.0.1:{s.kafka_port}"
    assert s.effective_redis_url == f"redis://127.0.0.1:{s.redis_port}/0"
    assert s.allowed_lateness_ms == 300_000
    assert s.topic_partitions == 8


def test_environment_is_typed() -> None:
    s = load_settings({"KAFKA_BOOTSTRAP": "k:1", "FRAUDSTREAM_PARTITIONS": "3",
                       "FRAUDSTREAM_MAX_WAIT_S": "0.5", "FRAUDSTREAM_STATE_DIR": "/tmp/x",
                       "FRAUDSTREAM_STORE": "rocksdb"})
    assert s.effective_kafka_bootstrap == "k:1"
    assert s.topic_partitions == 3 and s.max_wait_s == 0.5
    assert s.state_dir == Path("/tmp/x") and s.store == "rocksdb"


@pytest.mark.parametrize("var,value", [("FRAUDSTREAM_PARTITIONS", "eight"),
                                       ("FRAUDSTREAM_STORE", "postgres"),
                                       ("FRAUDSTREAM_REDIS_APPENDFSYNC", "sometimes")])
def test_bad_values_name_the_variable(var: str, value: str) -> None:
    with pytest.raises(ValueError, match=var):
        load_settings({var: value})


def test_every_field_is_documented_and_frozen() -> None:
    rows = describe_settings()
    assert len(rows) == len(dataclasses.fields(Settings))
    assert all(doc for _, _, doc in rows)
    s = load_settings({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.topic_partitions = 1  # type: ignore[misc]


def test_topic_prefix() -> None:
    assert load_settings({"FRAUDSTREAM_TOPIC_PREFIX": "x."}).topic("actions") == "x.actions"
