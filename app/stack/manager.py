"""The local stack as a whole: which services are ours to run, bring up, stop and report."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.settings import Settings
from app.stack.kafka import KafkaNode, StackError
from app.stack.redis import RedisNode
from app.stream.topics import TopicPlan, ensure_topics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """One service as `stack status` reports it."""

    name: str
    address: str
    managed: bool  # False: an external service named by KAFKA_BOOTSTRAP / REDIS_URL
    pid: int | None

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
    """Kafka and Redis for local runs; services named in the environment are left alone."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.kafka = KafkaNode(settings)
        self.redis = RedisNode(settings)

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

    def up(self) -> UpReport:
        """Start what is ours and not running, wait for real answers, create topics. Idempotent.

        Each service is tried even when another failed; StackFailures names every one that did
        not come up and why. Topics are created only when Kafka is up.
        """
        started: list[str] = []
        failures: dict[str, str] = {}
        seconds: dict[str, float] = {}
        t0 = time.monotonic()

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
            attempt("redis", lambda: self._port_free("redis", self.redis.process.pid(),
                                                     [self.settings.redis_port], "REDIS_URL",
                                                     "FRAUDSTREAM_REDIS_PORT"))
            if attempt("redis", self.redis.start):
                started.append("redis")
        if self.manages_kafka:
            ports = [self.settings.kafka_port, self.settings.kafka_controller_port]
            attempt("kafka", lambda: self._port_free("kafka", self.kafka.process.pid(), ports,
                                                     "KAFKA_BOOTSTRAP",
                                                     "FRAUDSTREAM_KAFKA_PORT"))
            if attempt("kafka", self.kafka.start):
                started.append("kafka")
        t1 = time.monotonic()
        if self.manages_redis:
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

    @staticmethod
    def _port_free(name: str, our_pid: int | None, ports: list[int], use_var: str,
                   port_var: str) -> None:
        """Refuse to start `name` on a port another process (not our pid file's) holds."""
        if our_pid is not None:
            return
        for port in ports:
            if port_taken(port):
                raise StackError(f"port {port} is taken by another process (another stack?): "
                                 f"use it with {use_var}, or pick a free port with {port_var}")

    def down(self) -> list[str]:
        """Stop, by pid, only the services that `up` started."""
        stopped = []
        if self.manages_kafka and self.kafka.stop():
            stopped.append("kafka")
        if self.manages_redis and self.redis.stop():
            stopped.append("redis")
        return stopped

    def status(self) -> list[ServiceStatus]:
        s = self.settings
        return [
            ServiceStatus("kafka", s.effective_kafka_bootstrap, self.manages_kafka,
                          self.kafka.process.pid() if self.manages_kafka else None),
            ServiceStatus("redis", s.effective_redis_url, self.manages_redis,
                          self.redis.process.pid() if self.manages_redis else None),
        ]

    def env_lines(self) -> list[str]:
        """`export` lines pointing clients at the stack, for `eval "$(fraudstream stack env)"`."""
        return [
            f"export KAFKA_BOOTSTRAP={self.settings.effective_kafka_bootstrap}",
            f"export REDIS_URL={self.settings.effective_redis_url}",
        ]
