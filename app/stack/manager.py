"""The local stack as a whole: which services are ours to run, bring up, stop and report."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from app.settings import Settings
from app.stack.kafka import KafkaNode
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
        """Start what is ours and not running, wait for real answers, create topics. Idempotent."""
        started: list[str] = []
        seconds: dict[str, float] = {}
        t0 = time.monotonic()
        if self.manages_kafka:
            self.kafka.ensure_jars()
            seconds["jars"] = time.monotonic() - t0
        if self.manages_redis and self.redis.start():
            started.append("redis")
        if self.manages_kafka and self.kafka.start():
            started.append("kafka")
        t1 = time.monotonic()
        if self.manages_redis:
            self.redis.wait_ready()
        if self.manages_kafka:
            self.kafka.wait_ready()
        seconds["ready"] = time.monotonic() - t1
        t2 = time.monotonic()
        plan = asyncio.run(ensure_topics(self.settings))
        seconds["topics"] = time.monotonic() - t2
        seconds["total"] = time.monotonic() - t0
        return UpReport(tuple(started), plan, seconds)

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
