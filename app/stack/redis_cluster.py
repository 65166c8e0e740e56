"""A local Redis Cluster: masters with replicas, each a `RedisNode` with `cluster-enabled yes`."""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import redis
from redis.crc import key_slot

from app.redis_url import cluster_url
from app.settings import Settings
from app.stack.kafka import StackError
from app.stack.redis import RedisNode, ensure_redis_server

log = logging.getLogger(__name__)

Role = Literal["master", "replica", "down"]


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One node as the cluster sees it now: its port, our pid of it, its role and slots."""

    port: int
    pid: int | None
    role: Role
    node_id: str
    master_id: str | None  # a replica's master; None for a master
    slots: tuple[tuple[int, int], ...]  # inclusive slot ranges a master serves

    def owns(self, slot: int) -> bool:
        """True when this master serves `slot`."""
        return any(lo <= slot <= hi for lo, hi in self.slots)


class RedisCluster:
    """`masters` masters with `replicas` replicas each on consecutive ports from `base_port`.

    Node i listens on `base_port + i` and keeps its data, log and pid file in
    `state_dir/node-<port>`; its cluster bus listens on `base_port + node_count + i` (set with
    `cluster-port`, so the whole cluster uses one compact port range instead of port + 10000).
    `start` is idempotent: nodes already running are kept, a cluster already formed (its
    nodes.conf survives restarts) is not created again.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        base_port: int,
        state_dir: Path,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 2000,
    ) -> None:
        if masters < 3:
            raise ValueError(f"Redis Cluster needs at least 3 masters, got {masters}")
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        self.settings = settings
        self.base_port = base_port
        self.state_dir = state_dir.resolve()
        self.masters = masters
        self.replicas = replicas
        count = masters * (1 + replicas)
        self.nodes = [
            RedisNode(
                settings,
                name=f"redis-cluster-{base_port + i}",
                home=self.state_dir / f"node-{base_port + i}",
                port=base_port + i,
                extra_config=(
                    "cluster-enabled yes",
                    "cluster-config-file nodes.conf",
                    f"cluster-port {base_port + count + i}",
                    f"cluster-node-timeout {node_timeout_ms}",
                    # a replica may always be promoted, however long its master has been gone
                    "cluster-replica-validity-factor 0",
                ),
            )
            for i in range(count)
        ]

    @property
    def ports(self) -> list[int]:
        """Client ports of every node, in start order."""
        return [node.port for node in self.nodes]

    @property
    def seed_url(self) -> str:
        """The REDIS_URL of the cluster (`redis+cluster://127.0.0.1:<base_port>`)."""
        return cluster_url("127.0.0.1", self.base_port)

    def start(self, timeout_s: float = 60.0) -> bool:
        """Start every node not running, form the cluster if new, wait until it serves.

        True when this call started at least one node. Raises StackError (with the log tail of
        the node at fault) when a node exits or the cluster is not ready in time.
        """
        binary = ensure_redis_server()
        started = False
        for node in self.nodes:
            if node.process.pid() is None:
                node.write_config()
                node.process.start([binary, str(node.config)])
                started = True
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            node.wait_ready(max(deadline - time.monotonic(), 1.0))
        if not self._formed():
            self._create()
        self.wait_ok(max(deadline - time.monotonic(), 1.0))
        return started

    def _formed(self) -> bool:
        info = self._info(self.nodes[0].port)
        return (info.get("cluster_known_nodes") == str(len(self.nodes))
                and info.get("cluster_slots_assigned") == "16384")

    def _create(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise StackError("redis-cli is missing (Debian's redis-tools package)")
        argv = [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                "--cluster-replicas", str(self.replicas), "--cluster-yes"]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False,  # noqa: S603
                              timeout=60)
        if proc.returncode != 0:
            raise StackError(f"redis-cli --cluster create failed:\n"
                             f"{(proc.stdout + proc.stderr)[-2000:]}")
        log.info("redis cluster created masters=%d replicas=%d base_port=%d", self.masters,
                 self.replicas, self.base_port)

    def wait_ok(self, timeout_s: float = 30.0, *, exclude: Sequence[int] = ()) -> None:
        """Block until every running node (not in `exclude`) reports `cluster_state:ok` and is
        seen as a master with slots or a replica (not flagged as failed), all slots are served,
        there are `masters` masters, and every replica's link to its master is up (so WAIT can
        be acknowledged at once)."""
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                last = self._not_ready(exclude)
            except redis.RedisError as exc:
                last = repr(exc)
            if not last:
                return
            time.sleep(0.1)
        tails = "\n".join(f"--- {n.process.name}\n{n.process.log_tail(8)}" for n in self.nodes)
        raise StackError(f"Redis Cluster not ready within {timeout_s:.0f}s ({last}).\n{tails}")

    def _not_ready(self, exclude: Sequence[int]) -> str:
        """Why the cluster is not ready yet, or '' when it is."""
        live = [n for n in self.nodes if n.port not in exclude and n.process.pid() is not None]
        for node in live:
            info = self._info(node.port)
            if info.get("cluster_state") != "ok":
                return f"node {node.port}: cluster_state={info.get('cluster_state')}"
        view = self.node_list()
        for node in view:
            # a restarted master is back once gossip has made it its successor's replica: until
            # then the others flag it as failed, or see a master without slots
            if node.pid is None or node.port in exclude:
                continue
            if node.role == "down":
                return f"node {node.port}: running, still flagged as failed"
            if node.role == "master" and not node.slots:
                return f"node {node.port}: a master without slots, not yet a replica"
        masters = [n for n in view if n.role == "master" and n.slots]
        if len(masters) != self.masters:
            return f"{len(masters)} masters serve slots, want {self.masters}"
        for node in view:
            if node.role == "replica" and node.port not in exclude:
                with self._client(node.port) as client:
                    if client.info("replication").get("master_link_status") != "up":
                        return f"replica {node.port}: link to its master is not up"
        return ""

    def node_list(self) -> list[ClusterNode]:
        """Every node with its current role (from CLUSTER NODES of a live node) and our pid;
        a node whose process is gone is `down`."""
        pids = {node.port: node.process.pid() for node in self.nodes}
        for port, pid in pids.items():
            if pid is None:
                continue
            with self._client(port) as client:
                raw = client.execute_command("CLUSTER", "NODES")
            text = raw.decode() if isinstance(raw, bytes) else str(raw)
            nodes = [self._parse_line(line, pids) for line in text.splitlines() if line.strip()]
            return sorted(nodes, key=lambda n: n.port)
        return [ClusterNode(p, None, "down", "", None, ()) for p in self.ports]

    @staticmethod
    def _parse_line(line: str, pids: dict[int, int | None]) -> ClusterNode:
        # <id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot> <slot> ...
        fields = line.split()
        port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
        flags = fields[2].split(",")
        role: Role = "master" if "master" in flags else "replica"
        if "fail" in flags or pids.get(port) is None:
            role = "down"
        slots: list[tuple[int, int]] = []
        for item in fields[8:]:
            if item.startswith("["):  # a slot being migrated
                continue
            lo, _, hi = item.partition("-")
            slots.append((int(lo), int(hi or lo)))
        master_id = None if fields[3] == "-" else fields[3]
        return ClusterNode(port, pids.get(port), role, fields[0], master_id, tuple(slots))

    def master_for_slot(self, slot: int) -> ClusterNode:
        """The live master serving `slot` now."""
        for node in self.node_list():
            if node.role == "master" and node.owns(slot):
                return node
        raise StackError(f"no live master serves slot {slot}")

    def master_for_key(self, key: str) -> ClusterNode:
        """The live master serving `key`'s slot (hash tags honoured)."""
        return self.master_for_slot(key_slot(key.encode()))

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        """The live replicas of `master`."""
        return [n for n in self.node_list() if n.role == "replica"
                and n.master_id == master.node_id]

    def node(self, port: int) -> RedisNode:
        """Our node process on `port` (to kill it by its pid, read its log)."""
        for node in self.nodes:
            if node.port == port:
                return node
        raise KeyError(port)

    def stop(self) -> list[int]:
        """Stop, by pid, every node we started (SIGTERM: each fsyncs its AOF); their ports."""
        return [node.port for node in self.nodes if node.stop()]

    def _info(self, port: int) -> dict[str, str]:
        with self._client(port) as client:
            raw = client.execute_command("CLUSTER", "INFO")
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return dict(line.split(":", 1) for line in text.split() if ":" in line)

    @staticmethod
    def _client(port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2,
                           socket_connect_timeout=2)
