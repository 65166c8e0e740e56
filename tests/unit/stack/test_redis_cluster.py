"""The local Redis Cluster's layout: ports, configs, seed URL, CLUSTER NODES parsing (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.crc import key_slot

from app.redis_url import cluster_url, is_cluster_url, node_url
from app.settings import load_settings
from app.stack.redis_cluster import ClusterNode, RedisCluster

NODES = """\
e3dc 127.0.0.1:17003@17009 slave a9af 0 1 3 connected
8b43 127.0.0.1:17000@17006 myself,master - 0 0 1 connected 0-5460
931b 127.0.0.1:17004@17010 slave 8b43 0 1 1 connected
9cb1 127.0.0.1:17005@17011 master,fail - 0 1 2 disconnected
a9af 127.0.0.1:17002@17008 master - 0 1 3 connected 10923-16383
2d48 127.0.0.1:17001@17007 master - 0 1 2 connected 5461-10922 [5462->-abcd]
"""


def _cluster(tmp_path: Path, **kwargs: int) -> RedisCluster:
    return RedisCluster(load_settings({}), base_port=17000, state_dir=tmp_path, **kwargs)


def test_six_nodes_on_consecutive_ports_with_bus_ports_after_them(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    assert cluster.ports == list(range(17000, 17006))
    for i, node in enumerate(cluster.nodes):
        node.write_config()
        lines = node.config.read_text().splitlines()
        assert f"port {17000 + i}" in lines
        assert f"cluster-port {17006 + i}" in lines
        assert "cluster-enabled yes" in lines
        assert "appendonly yes" in lines
        assert node.home == tmp_path.resolve() / f"node-{17000 + i}"
        assert node.process.pid_file.parent == node.home


def test_replica_count_and_minimum_masters(tmp_path: Path) -> None:
    assert len(_cluster(tmp_path, masters=3, replicas=2).nodes) == 9
    with pytest.raises(ValueError, match="at least 3 masters"):
        _cluster(tmp_path, masters=2)


def test_seed_url_is_a_cluster_url(tmp_path: Path) -> None:
    url = _cluster(tmp_path).seed_url
    assert url == "redis+cluster://127.0.0.1:17000" == cluster_url("127.0.0.1", 17000)
    assert is_cluster_url(url)
    assert node_url(url) == "redis://127.0.0.1:17000"
    assert not is_cluster_url("redis://127.0.0.1:16379/0")
    assert node_url("redis://127.0.0.1:16379/0") == "redis://127.0.0.1:16379/0"
    assert node_url("rediss+cluster://u:p@h:1") == "rediss://u:p@h:1"


def test_cluster_nodes_parsed_with_roles_slots_and_our_pids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = {17000: 10, 17001: 11, 17002: 12, 17003: 13, 17004: None, 17005: 15}
    nodes = [RedisCluster._parse_line(line, pids) for line in NODES.splitlines()]
    by_port = {n.port: n for n in nodes}
    assert by_port[17000] == ClusterNode(17000, 10, "master", "8b43", None, ((0, 5460),))
    assert by_port[17003].role == "replica" and by_port[17003].master_id == "a9af"
    assert by_port[17004].role == "down"  # our process is gone
    assert by_port[17005].role == "down"  # the cluster flags it failed
    assert by_port[17001].slots == ((5461, 10922),)  # a migrating slot is not listed

    cluster = _cluster(tmp_path)
    monkeypatch.setattr(cluster, "node_list", lambda: sorted(nodes, key=lambda n: n.port))
    assert cluster.master_for_slot(0).port == 17000
    assert cluster.master_for_slot(16383).port == 17002
    assert cluster.master_for_key("x").port == cluster.master_for_slot(key_slot(b"x")).port
    assert [r.port for r in cluster.replicas_of(by_port[17002])] == [17003]


def test_a_restarted_master_is_not_ready_until_it_is_a_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 17005 runs again (pid 15), a master killed earlier; gossip has not yet made it a
    # replica of the node that took its slots: the view says master,fail
    pids = {17000: 10, 17001: 11, 17002: 12, 17003: 13, 17004: 14, 17005: 15}
    nodes = [RedisCluster._parse_line(line, pids) for line in NODES.splitlines()]
    cluster = _cluster(tmp_path)
    monkeypatch.setattr(cluster, "_info", lambda port: {"cluster_state": "ok"})
    monkeypatch.setattr(cluster, "node_list", lambda: nodes)
    monkeypatch.setattr(cluster, "_client", lambda port: _LinkUp())
    assert cluster._not_ready(()) == "node 17005: running, still flagged as failed"
    # left out (the node being killed): the rest is judged as before, and is ready
    assert cluster._not_ready([17005]) == ""
    # the failure flag cleared, but it is a master that lost its slots: not a replica yet
    slotless = RedisCluster._parse_line("9cb1 127.0.0.1:17005@17011 master - 0 1 2 connected",
                                        pids)
    nodes[3] = slotless
    assert cluster._not_ready(()) == "node 17005: a master without slots, not yet a replica"
    nodes[3] = RedisCluster._parse_line(
        "9cb1 127.0.0.1:17005@17011 slave 2d48 0 1 2 connected", pids)
    assert cluster._not_ready(()) == ""


class _LinkUp:
    """A replica's client whose link to its master is up."""

    def __enter__(self) -> _LinkUp:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def info(self, section: str) -> dict[str, str]:
        assert section == "replication"
        return {"master_link_status": "up"}
