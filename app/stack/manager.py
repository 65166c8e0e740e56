"""The local stack as a whole: which services are ours to run, bring up, stop and report.

Two profiles: single (one Kafka node, one Redis) and cluster (three KRaft Kafka nodes, a Redis
Cluster of three masters with a replica each); see app.stack.profile.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from app.kafka.topics import TopicPlan, ensure_topics
from app.settings import Settings
from app.stack.kafka import KafkaNode, StackError
from app.stack.kafka_cluster import KafkaCluster
from app.stack.profile import (
    forget_profile,
    remember_profile,
    remembered_profile,
    resolve_profile,
)
from app.stack.redis import RedisNode
from app.stack.redis_cluster import RedisCluster

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """One service (one node of a cluster) as `stack status` reports it."""

    name: str
    address: str
    managed: bool  # False: an external service named by KAFKA_BOOTSTRAP / REDIS_URL
    pid: int | None
    role: str = ""

    @property
    def state(self) -> str:
        if not self.managed:
            return "external"
        return f"running (pid {self.pid})" if self.pid else "stopped"


@dataclass(frozen=True, slots=True)
class UpReport:
    """What `Stack.up` did and how long each step took."""

    started: tuple[str, ...]
    topics: TopicPlan
    seconds: dict[str, float]


class StackFailures(StackError):
    """Every service that failed to come up, each with its reason (one line each)."""

    def __init__(self, failures: dict[str, str]) -> None:
        self.failures = failures
        super().__init__("; ".join(f"{name}: {why}" for name, why in failures.items()))


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already accepts connections on host:port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class Stack:
    """Kafka and Redis for local runs; services named in the environment are left alone.

    The profile (FRAUDSTREAM_STACK_PROFILE, else the one `up` last recorded in the state dir,
    else single) picks one node of each, or a three-node Kafka and a Redis Cluster.
    """

    kafka: KafkaNode | KafkaCluster
    redis: RedisNode | RedisCluster

    def __init__(self, settings: Settings) -> None:
        self.settings = resolve_profile(settings)
        if self.settings.profile == "cluster":
            self.kafka = KafkaCluster(self.settings)
            self.redis = RedisCluster(self.settings, base_port=self.settings.redis_cluster_port,
                                      state_dir=self.settings.state_dir / "redis-cluster")
        else:
            self.kafka = KafkaNode(self.settings)
            self.redis = RedisNode(self.settings)

    # A variable that names the local address (as `stack env` prints it) still means "ours":
    # otherwise `eval "$(fraudstream stack env)"` would make `stack down` leave everything running.
    @property
    def manages_kafka(self) -> bool:
        s = self.settings
        return s.kafka_bootstrap in (None, s.local_kafka_bootstrap)

    @property
    def manages_redis(self) -> bool:
        s = self.settings
        return s.redis_url in (None, s.local_redis_url)

    @property
    def kafka_nodes(self) -> tuple[KafkaNode, ...]:
        return self.kafka.nodes if isinstance(self.kafka, KafkaCluster) else (self.kafka,)

    @property
    def redis_nodes(self) -> tuple[RedisNode, ...]:
        return tuple(self.redis.nodes) if isinstance(self.redis, RedisCluster) else (self.redis,)

    def up(self) -> UpReport:
        """Start what is ours and not running, wait for real answers, create topics. Idempotent.

        Each service is tried even when another failed; StackFailures names every one that did
        not come up and why. Topics are created only when Kafka is up.
        """
        started: list[str] = []
        failures: dict[str, str] = {}
        seconds: dict[str, float] = {}
        t0 = time.monotonic()
        self._remember()

        def attempt(name: str, step: Callable[[], object]) -> object:
            if name in failures:
                return None
            try:
                return step()
            except (StackError, RuntimeError, OSError) as exc:
                failures[name] = str(exc)
                return None

        if self.manages_kafka:
            attempt("kafka", self.kafka.ensure_jars)
            seconds["jars"] = time.monotonic() - t0
        if self.manages_redis:
            redis_down = [n.process.name for n in self.redis_nodes if n.process.pid() is None]
            attempt("redis", lambda: self._ports_free(self._redis_ports(), "REDIS_URL", (
                "FRAUDSTREAM_REDIS_CLUSTER_PORT" if isinstance(self.redis, RedisCluster)
                else "FRAUDSTREAM_REDIS_PORT")))
            if isinstance(self.redis, RedisNode) and attempt("redis", self.redis.start):
                started.extend(redis_down)
        if self.manages_kafka:
            kafka_down = [n.name for n in self.kafka_nodes if n.process.pid() is None]
            attempt("kafka", lambda: self._ports_free(self._kafka_ports(), "KAFKA_BOOTSTRAP", (
                "FRAUDSTREAM_KAFKA_CLUSTER_PORT" if isinstance(self.kafka, KafkaCluster)
                else "FRAUDSTREAM_KAFKA_PORT")))
            if attempt("kafka", self.kafka.start):
                started.extend(kafka_down)
        t1 = time.monotonic()
        if self.manages_redis:
            if isinstance(self.redis, RedisCluster):
                # starts the nodes, forms the cluster once, waits for every slot and replica
                if attempt("redis", self.redis.start):
                    started.extend(redis_down)
            else:
                attempt("redis", self.redis.wait_ready)
        if self.manages_kafka:
            attempt("kafka", self.kafka.wait_ready)
        seconds["ready"] = time.monotonic() - t1
        if failures:
            raise StackFailures(failures)
        t2 = time.monotonic()
        plan = asyncio.run(ensure_topics(self.settings))
        seconds["topics"] = time.monotonic() - t2
        seconds["total"] = time.monotonic() - t0
        return UpReport(tuple(started), plan, seconds)

    def running(self) -> bool:
        """True when any node of this profile's services runs (by our pid files)."""
        return any(n.process.pid() for n in (*self.kafka_nodes, *self.redis_nodes))

    def _remember(self) -> None:
        """Record this profile for `down`/`status`/`env` without a flag, before anything starts
        (a half-started cluster must be found too). Another profile still running keeps the
        record: both can run side by side, and the running one must not be forgotten."""
        other = remembered_profile(self.settings)
        if other is not None and other != self.settings.profile:
            if Stack(self.settings.replace(stack_profile=other)).running():
                log.warning("the %s profile still runs in %s: it stays the remembered one; "
                            "name the %s profile explicitly for this one", other,
                            self.settings.state_dir, self.settings.profile)
                return
        if self.settings.profile != "single" or other is not None:
            remember_profile(self.settings)

    def _kafka_ports(self) -> list[int]:
        """Ports of our Kafka nodes that are not running (those must be free)."""
        return [p for n in self.kafka_nodes if n.process.pid() is None for p in n.ports]

    def _redis_ports(self) -> list[int]:
        """Ports of our Redis nodes that are not running, cluster bus ports included."""
        nodes = self.redis_nodes
        ports = [n.port for n in nodes if n.process.pid() is None]
        if isinstance(self.redis, RedisCluster):
            ports += [self.redis.base_port + len(nodes) + i
                      for i, n in enumerate(nodes) if n.process.pid() is None]
        return ports

    @staticmethod
    def _ports_free(ports: list[int], use_var: str, port_var: str) -> None:
        """Refuse to start a service on a port another process (not our pid file's) holds."""
        for port in ports:
            if port_taken(port):
                raise StackError(f"port {port} is taken by another process (another stack?): "
                                 f"use it with {use_var}, or pick a free port with {port_var}")

    def down(self) -> list[str]:
        """Stop, by pid, only the services that `up` started (every node of a cluster)."""
        stopped = []
        if self.manages_kafka:
            running = [n.name for n in self.kafka_nodes if n.process.pid() is not None]
            if self.kafka.stop():
                stopped.extend(running)
        if self.manages_redis:
            running = [n.process.name for n in self.redis_nodes if n.process.pid() is not None]
            if self.redis.stop():
                stopped.extend(running)
        if remembered_profile(self.settings) == self.settings.profile and not self.running():
            forget_profile(self.settings)
        return stopped

    def status(self) -> list[ServiceStatus]:
        """Every node of every service: address, pid, role."""
        s = self.settings
        if not self.manages_kafka:
            rows = [ServiceStatus("kafka", s.effective_kafka_bootstrap, False, None)]
        else:
            rows = [ServiceStatus(n.name, n.address, True, n.process.pid(),
                                  f"broker+controller (node {n.layout.node_id})")
                    for n in self.kafka_nodes]
        if not self.manages_redis:
            rows.append(ServiceStatus("redis", s.effective_redis_url, False, None))
        elif isinstance(self.redis, RedisCluster):
            roles = _redis_cluster_roles(self.redis)
            rows += [ServiceStatus(n.process.name, f"127.0.0.1:{n.port}", True, n.process.pid(),
                                   roles.get(n.port, "")) for n in self.redis.nodes]
        else:
            rows.append(ServiceStatus("redis", s.effective_redis_url, True,
                                      self.redis.process.pid(), "single node"))
        return rows

    def env_lines(self) -> list[str]:
        """`export` lines pointing clients at the stack, for `eval "$(fraudstream stack env)"`."""
        return [
            f"export KAFKA_BOOTSTRAP={self.settings.effective_kafka_bootstrap}",
            f"export REDIS_URL={self.settings.effective_redis_url}",
            # workers create Faust's changelogs with the profile's replication factor
            f"export FRAUDSTREAM_STACK_PROFILE={self.settings.profile}",
        ]


def _redis_cluster_roles(cluster: RedisCluster) -> dict[int, str]:
    """port -> master (slots) / replica of PORT / down, as the live cluster sees it now."""
    try:
        view = cluster.node_list()
    except redis.RedisError:
        return {}
    by_id = {n.node_id: n.port for n in view}
    roles = {}
    for n in view:
        if n.role == "master":
            roles[n.port] = f"master ({sum(hi - lo + 1 for lo, hi in n.slots)} slots)"
        elif n.role == "replica":
            roles[n.port] = f"replica of {by_id.get(n.master_id or '', '?')}"
        else:
            roles[n.port] = "down"
    return roles
