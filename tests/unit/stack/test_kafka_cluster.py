"""The cluster profile's generated Kafka configs: one quorum, replication 3, ports unique."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import load_settings
from app.stack.kafka import KafkaNode, server_properties, single_layout
from app.stack.kafka_cluster import KafkaCluster, cluster_layouts


def _cluster_settings(tmp_path: Path, base: int = 29100):
    return load_settings({"FRAUDSTREAM_STATE_DIR": str(tmp_path),
                          "FRAUDSTREAM_STACK_PROFILE": "cluster",
                          "FRAUDSTREAM_KAFKA_CLUSTER_PORT": str(base)})


def _props(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


def test_three_nodes_share_one_quorum_of_three_voters(tmp_path: Path) -> None:
    settings = _cluster_settings(tmp_path)
    layouts = cluster_layouts(settings)
    assert [n.node_id for n in layouts] == [1, 2, 3]
    props = [server_properties(settings, n) for n in layouts]
    voters = {p["controller.quorum.voters"] for p in props}
    assert voters == {"1@127.0.0.1:29101,2@127.0.0.1:29103,3@127.0.0.1:29105"}
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    for p in props:
        assert p["process.roles"] == "broker,controller"


def test_replication_and_min_insync_on_the_cluster(tmp_path: Path) -> None:
    settings = _cluster_settings(tmp_path)
    for node in cluster_layouts(settings):
        p = server_properties(settings, node)
        assert p["default.replication.factor"] == "3"
        assert p["min.insync.replicas"] == "2"
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"
        assert p["unclean.leader.election.enable"] == "false"
    assert settings.replication == 3


def test_the_single_node_keeps_replication_one(tmp_path: Path) -> None:
    settings = load_settings({"FRAUDSTREAM_STATE_DIR": str(tmp_path)})
    p = server_properties(settings, single_layout(settings))
    assert p["controller.quorum.voters"] == f"1@127.0.0.1:{settings.kafka_controller_port}"
    assert p["default.replication.factor"] == p["offsets.topic.replication.factor"] == "1"
    assert p["min.insync.replicas"] == "1"
    assert settings.replication == 1
    assert settings.local_kafka_bootstrap == f"127.0.0.1:{settings.kafka_port}"
    # an explicit FRAUDSTREAM_REPLICATION wins over the profile's default
    assert load_settings({"FRAUDSTREAM_STACK_PROFILE": "cluster",
                          "FRAUDSTREAM_REPLICATION": "2"}).replication == 2


def test_every_port_dir_and_pid_file_is_its_own(tmp_path: Path) -> None:
    cluster = KafkaCluster(_cluster_settings(tmp_path))
    ports = [p for n in cluster.nodes for p in n.ports]
    assert len(set(ports)) == len(ports) == 6
    assert all(29100 <= p <= 29105 for p in ports)
    assert len({n.home for n in cluster.nodes}) == 3
    assert len({n.process.pid_file for n in cluster.nodes}) == 3
    assert len({n.name for n in cluster.nodes}) == 3
    single = KafkaNode(load_settings({"FRAUDSTREAM_STATE_DIR": str(tmp_path)}))
    assert single.home not in {n.home for n in cluster.nodes}


def test_bootstrap_lists_all_three_brokers(tmp_path: Path) -> None:
    settings = _cluster_settings(tmp_path)
    cluster = KafkaCluster(settings)
    assert cluster.bootstrap == "127.0.0.1:29100,127.0.0.1:29102,127.0.0.1:29104"
    assert settings.local_kafka_bootstrap == cluster.bootstrap


def test_written_configs_use_each_nodes_own_data_dir_and_one_cluster_id(tmp_path: Path) -> None:
    cluster = KafkaCluster(_cluster_settings(tmp_path))
    for node in cluster.nodes:
        node.write_config()
        props = _props(node.config)
        assert props["log.dirs"] == str(node.home / "data")
        assert props["listeners"] == (f"PLAINTEXT://127.0.0.1:{node.layout.port},"
                                      f"CONTROLLER://127.0.0.1:{node.layout.controller_port}")
    ids = {node.cluster_id() for node in cluster.nodes}
    assert len(ids) == 1 and len(ids.pop()) == 22
    assert KafkaCluster(_cluster_settings(tmp_path)).cluster_id() == cluster.cluster_id()


def test_heap_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRAUDSTREAM_KAFKA_CLUSTER_HEAP", "448m")
    settings = load_settings(stack_profile="cluster", state_dir=tmp_path)
    assert {n.heap for n in cluster_layouts(settings)} == {"448m"}


def test_every_node_runs_with_a_pauseless_collector_and_logs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ZGC: no stop-the-world pause of the broker inside a 50 ms event → served budget (G1's
    # young pauses took 7-33 ms here, whatever its pause target)
    monkeypatch.setattr(KafkaNode, "ensure_jars", lambda self: tmp_path / "jars")
    settings = _cluster_settings(tmp_path)
    for layout in cluster_layouts(settings):
        argv = KafkaNode(settings, layout)._java("kafka.Kafka", "server.properties")
        assert argv[1:3] == [f"-Xms{layout.heap}", f"-Xmx{layout.heap}"]
        assert "-XX:+UseZGC" in argv
        assert not [a for a in argv if "G1" in a]
        log = next(a for a in argv if a.startswith("-Xlog:gc:file="))
        assert str(layout.home / "logs" / "gc.log") in log
        assert (layout.home / "logs").is_dir()  # the JVM refuses to start if it cannot open it
        assert argv[-2:] == ["kafka.Kafka", "server.properties"]
