"""The local Apache Kafka node: jars from Maven Central, KRaft storage, one broker+controller."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import subprocess
import time
import uuid
from base64 import urlsafe_b64encode
from pathlib import Path

from app.settings import Settings
from app.stack.process import ManagedProcess

log = logging.getLogger(__name__)

POM = Path(__file__).with_name("pom.xml")

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class StackError(RuntimeError):
    """A local service could not be prepared or did not come up."""


class KafkaNode:
    """One combined KRaft broker+controller whose data lives under the project's state dir."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.state_dir.resolve() / "kafka"
        self.config = self.home / "server.properties"
        self.process = ManagedProcess(
            name="kafka",
            pid_file=self.home / "kafka.pid",
            log_file=self.home / "logs" / "server.log",
            markers=(str(self.config),),
        )

    # --- jars -------------------------------------------------------------------------------
    @property
    def jar_dir(self) -> Path:
        """Jar cache for this exact pom (a pom change resolves into a fresh directory)."""
        digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
        return self.settings.jar_cache.expanduser() / digest

    def ensure_jars(self) -> Path:
        """Resolve Kafka's jars from Maven Central once (`mvn dependency:copy-dependencies`)."""
        jars = self.jar_dir
        stamp = jars / ".complete"
        if stamp.exists():
            return jars
        mvn = shutil.which("mvn")
        if mvn is None:
            raise StackError("Maven (mvn) is not installed: apt-get install -y maven")
        jars.mkdir(parents=True, exist_ok=True)
        log.info("resolving Kafka jars from Maven Central into %s", jars)
        proc = subprocess.run(  # noqa: S603
            [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
             f"-DoutputDirectory={jars}", "-DincludeScope=runtime"],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise StackError(f"mvn failed to resolve Kafka jars:\n{(proc.stdout + proc.stderr)[-3000:]}")
        stamp.write_text("ok\n")
        return jars

    # --- storage ----------------------------------------------------------------------------
    def write_config(self) -> None:
        """Write server.properties and the log4j2 config (idempotent)."""
        s = self.settings
        data = self.home / "data"
        data.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{s.kafka_controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{s.kafka_port},CONTROLLER://127.0.0.1:{s.kafka_controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{s.kafka_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": str(s.topic_partitions),
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Faust declares its changelog topics itself; everything else is created explicitly.
            "auto.create.topics.enable": "false",
            "log.retention.hours": "168",
            "num.io.threads": "2",
            "num.network.threads": "2",
        }
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.home / "log4j2.properties").write_text(_LOG4J2)

    def _java(self, main: str, *args: str) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise StackError("no JDK found: apt-get install -y openjdk-17-jre-headless")
        heap = self.settings.kafka_heap
        return [
            java, f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-cp", f"{self.ensure_jars()}/*", main, *args,
        ]

    def ensure_formatted(self) -> None:
        """Format KRaft storage once; later starts reuse it (topics, offsets survive restarts)."""
        if (self.home / "data" / "meta.properties").exists():
            return
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        proc = subprocess.run(  # noqa: S603
            self._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(self.config)),
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{(proc.stdout + proc.stderr)[-3000:]}")

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> bool:
        """Start the broker unless ours already runs; True when this call started it."""
        if self.process.pid() is not None:
            return False
        self.write_config()
        self.ensure_formatted()
        self.process.start(self._java("kafka.Kafka", str(self.config)))
        return True

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Block until the broker answers a metadata request, or raise with the log tail."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        # aiokafka logs every refused connection at ERROR; while waiting those are expected.
        quiet = logging.getLogger("aiokafka")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            while time.monotonic() < deadline:
                if self.process.exited():
                    raise StackError(
                        f"Kafka exited during start-up. Log tail:\n{self.process.log_tail()}")
                try:
                    asyncio.run(kafka_metadata_ok(self.settings.local_kafka_bootstrap))
                    return
                except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                    last = exc
                    time.sleep(0.5)
        finally:
            quiet.setLevel(level)
        raise StackError(
            f"Kafka did not answer metadata on {self.settings.local_kafka_bootstrap} within "
            f"{timeout_s:.0f}s ({last!r}). Log tail:\n{self.process.log_tail()}"
        )

    def stop(self) -> bool:
        """Stop our broker (SIGTERM: a clean shutdown keeps every log and offset)."""
        return self.process.stop(timeout_s=60.0)


async def kafka_metadata_ok(bootstrap: str, timeout_s: float = 5.0) -> list[str]:
    """Fetch cluster metadata once; returns the topic names (raises when unreachable)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    await asyncio.wait_for(admin.start(), timeout_s)
    try:
        return await asyncio.wait_for(admin.list_topics(), timeout_s)
    finally:
        await admin.close()
