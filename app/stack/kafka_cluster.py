"""The cluster profile's Kafka: three combined KRaft broker+controller nodes, replication 3."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.settings import KAFKA_CLUSTER_NODES, Settings
from app.stack.kafka import KafkaNode, KafkaNodeLayout, StackError, new_cluster_id

log = logging.getLogger(__name__)

#: Writes with acks=all need this many in-sync replicas: one node may die without a refusal.
MIN_INSYNC_REPLICAS: Final = 2


def cluster_home(settings: Settings) -> Path:
    """Directory holding every node's directory and the shared cluster id."""
    return settings.state_dir.resolve() / "kafka-cluster"


def cluster_layouts(settings: Settings) -> tuple[KafkaNodeLayout, ...]:
    """Node 1..3: own ports (see Settings.kafka_cluster_ports), own directory, one quorum."""
    ports = settings.kafka_cluster_ports
    voters = ",".join(f"{i}@127.0.0.1:{controller}"
                      for i, (_, controller) in enumerate(ports, start=1))
    home = cluster_home(settings)
    return tuple(
        KafkaNodeLayout(
            node_id=i, home=home / f"node-{i}", port=broker, controller_port=controller,
            voters=voters, replication=KAFKA_CLUSTER_NODES, min_isr=MIN_INSYNC_REPLICAS,
            heap=settings.kafka_cluster_heap, name=f"kafka-{i}",
        )
        for i, (broker, controller) in enumerate(ports, start=1)
    )


class KafkaCluster:
    """Three KafkaNodes formatted with one cluster id, started and stopped together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = cluster_home(settings)
        self.nodes: tuple[KafkaNode, ...] = tuple(
            KafkaNode(settings, layout, cluster_id=self.cluster_id)
            for layout in cluster_layouts(settings))

    @property
    def bootstrap(self) -> str:
        """Every node's broker address, comma-separated (what clients bootstrap from)."""
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        """The node with this KRaft node id (= broker id)."""
        for n in self.nodes:
            if n.layout.node_id == node_id:
                return n
        raise KeyError(node_id)

    def ensure_jars(self) -> Path:
        return self.nodes[0].ensure_jars()

    def cluster_id(self) -> str:
        """The id every node is formatted with: made once, kept next to the nodes' data."""
        path = self.home / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        self.home.mkdir(parents=True, exist_ok=True)
        cid = new_cluster_id()
        path.write_text(cid + "\n")
        return cid

    def start(self) -> bool:
        """Start every node that is not running; True when this call started any."""
        started = [n.start() for n in self.nodes]
        return any(started)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Block until each node answers metadata and the cluster lists all three brokers."""
        deadline = time.monotonic() + timeout_s
        for n in self.nodes:
            n.wait_ready(timeout_s=max(1.0, deadline - time.monotonic()))
        want = {n.layout.node_id for n in self.nodes}
        seen: set[int] = set()
        while time.monotonic() < deadline:
            try:
                seen = set(asyncio.run(broker_ids(self.bootstrap)))
            except Exception:  # noqa: BLE001 - any failure means "not ready yet"
                seen = set()
            if seen >= want:
                return
            time.sleep(0.5)
        raise StackError(f"Kafka cluster lists brokers {sorted(seen)}, wants {sorted(want)} "
                         f"after {timeout_s:.0f}s")

    def stop(self) -> bool:
        """SIGTERM every node at once (one by one, the last would wait for a lost quorum)."""
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            stopped = list(pool.map(lambda n: n.stop(), self.nodes))
        return any(stopped)


async def broker_ids(bootstrap: str, timeout_s: float = 5.0) -> list[int]:
    """Node ids of the brokers the cluster's metadata lists (raises when unreachable)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap,
                                request_timeout_ms=int(timeout_s * 1000))
    await asyncio.wait_for(admin.start(), timeout_s)
    try:
        described = await asyncio.wait_for(admin.describe_cluster(), timeout_s)
        return sorted(b["node_id"] for b in described["brokers"])
    finally:
        await admin.close()


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as the cluster's metadata shows it now."""

    topic: str
    partition: int
    leader: int  # -1: no leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


async def describe_partitions(settings: Settings, names: list[str]) -> list[PartitionState]:
    """Leader, replicas and in-sync replicas of every partition of `names`."""
    from app.kafka.inspect import admin_client

    async with admin_client(settings, timeout_s=10.0) as admin:
        described = await admin.describe_topics(names)
    return sorted(
        (PartitionState(t["topic"], p["partition"], p["leader"], tuple(p["replicas"]),
                        tuple(p["isr"]))
         for t in described for p in t["partitions"]),
        key=lambda s: (s.topic, s.partition))
