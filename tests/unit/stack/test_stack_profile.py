"""Stack profiles: picked by flag or variable, remembered by `up`, forgotten by `down`."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.settings import SettingsError, load_settings
from app.stack.kafka_cluster import KafkaCluster
from app.stack.manager import Stack
from app.stack.profile import (
    forget_profile,
    profile_file,
    remember_profile,
    remembered_profile,
    resolve_profile,
)
from app.stack.redis_cluster import RedisCluster


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("KAFKA_BOOTSTRAP", "REDIS_URL", "FRAUDSTREAM_STACK_PROFILE",
                "FRAUDSTREAM_REPLICATION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FRAUDSTREAM_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("FRAUDSTREAM_KAFKA_CLUSTER_PORT", "29150")
    monkeypatch.setenv("FRAUDSTREAM_REDIS_CLUSTER_PORT", "17150")
    return tmp_path


def test_single_is_the_default(clean_env: Path) -> None:
    stack = Stack(load_settings())
    assert stack.settings.profile == "single"
    assert not isinstance(stack.kafka, KafkaCluster)
    assert not isinstance(stack.redis, RedisCluster)


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(SettingsError, match="FRAUDSTREAM_STACK_PROFILE"):
        load_settings({"FRAUDSTREAM_STACK_PROFILE": "triple"})


def test_a_remembered_profile_is_used_until_forgotten(clean_env: Path) -> None:
    cluster = load_settings(stack_profile="cluster")
    remember_profile(cluster)
    assert remembered_profile(load_settings()) == "cluster"
    assert resolve_profile(load_settings()).profile == "cluster"
    # an explicit choice wins over the remembered one
    assert resolve_profile(load_settings(stack_profile="single")).profile == "single"
    forget_profile(cluster)
    assert resolve_profile(load_settings()).profile == "single"


def test_a_garbled_profile_file_falls_back_to_single(clean_env: Path) -> None:
    profile_file(load_settings()).write_text("triple\n")
    assert resolve_profile(load_settings()).profile == "single"


def test_cluster_stack_has_every_node(clean_env: Path) -> None:
    stack = Stack(load_settings(stack_profile="cluster"))
    assert isinstance(stack.kafka, KafkaCluster) and isinstance(stack.redis, RedisCluster)
    rows = stack.status()
    assert [r.name for r in rows[:3]] == ["kafka-1", "kafka-2", "kafka-3"]
    assert len(rows) == 3 + 6
    assert all(r.managed and r.pid is None and r.state == "stopped" for r in rows)
    assert all("broker+controller" in r.role for r in rows[:3])


def test_cluster_env_lines(clean_env: Path) -> None:
    lines = Stack(load_settings(stack_profile="cluster")).env_lines()
    assert lines == [
        "export KAFKA_BOOTSTRAP=127.0.0.1:29150,127.0.0.1:29152,127.0.0.1:29154",
        "export REDIS_URL=redis+cluster://127.0.0.1:17150",
        "export FRAUDSTREAM_STACK_PROFILE=cluster",
    ]
    # what env exports still names our own cluster: `down` after `eval` stops it
    exported = load_settings({"KAFKA_BOOTSTRAP": lines[0].split("=", 1)[1],
                              "REDIS_URL": lines[1].split("=", 1)[1],
                              "FRAUDSTREAM_STACK_PROFILE": "cluster",
                              "FRAUDSTREAM_STATE_DIR": str(clean_env),
                              "FRAUDSTREAM_KAFKA_CLUSTER_PORT": "29150",
                              "FRAUDSTREAM_REDIS_CLUSTER_PORT": "17150"})
    stack = Stack(exported)
    assert stack.manages_kafka and stack.manages_redis
    assert exported.replication == 3


def test_cli_remembers_the_profile_for_env_status_and_down(clean_env: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli.main import cli

    # `up` is stubbed: its recording of the profile is what is under test here
    def fake_up(self: Stack) -> None:
        remember_profile(self.settings)
        raise SystemExit(0)

    monkeypatch.setattr(Stack, "up", fake_up)
    runner = CliRunner()
    assert runner.invoke(cli, ["stack", "up", "--profile", "cluster"]).exit_code == 0
    env = runner.invoke(cli, ["stack", "env"])
    assert "127.0.0.1:29150,127.0.0.1:29152,127.0.0.1:29154" in env.stdout
    assert "redis+cluster://127.0.0.1:17150" in env.stdout
    status = runner.invoke(cli, ["stack", "status"])
    assert "profile: cluster" in status.stdout and "kafka-3" in status.stdout
    down = runner.invoke(cli, ["stack", "down"])
    assert down.exit_code == 0 and "nothing was running" in down.stdout
    # nothing of the cluster runs any more: the default is back
    assert "profile: single" in runner.invoke(cli, ["stack", "status"]).stdout


def _pretend_running(pid_file: Path) -> None:
    """A pid file naming this very process: `ManagedProcess.pid()` then reports it running."""
    import os

    from app.stack.process import _start_time

    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")


def test_a_running_cluster_stays_remembered_when_single_comes_up_beside_it(
        clean_env: Path) -> None:
    cluster = Stack(load_settings(stack_profile="cluster"))
    remember_profile(cluster.settings)
    _pretend_running(cluster.kafka_nodes[1].process.pid_file)
    assert cluster.running()
    single = Stack(load_settings(stack_profile="single"))
    single._remember()  # what `up` does first
    assert remembered_profile(load_settings()) == "cluster"
    # stopping the single stack does not forget the cluster either
    assert single.down() == []
    assert remembered_profile(load_settings()) == "cluster"
    cluster.kafka_nodes[1].process.pid_file.unlink()
    single._remember()  # the cluster is gone: the newest profile is the one remembered
    assert remembered_profile(load_settings()) == "single"


def test_single_up_writes_no_profile_file_by_default(clean_env: Path) -> None:
    Stack(load_settings())._remember()
    assert not profile_file(load_settings()).exists()
