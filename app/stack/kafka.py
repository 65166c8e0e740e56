"""A local Apache Kafka node: jars from Maven Central, KRaft storage, one broker+controller."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import subprocess
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

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


#: The broker's collector: ZGC, whose pauses stay under a millisecond. The JVM's default (G1,
#: 200 ms pause target) grew a 640 MB young generation on the 1 GiB broker and stopped it 21-33 ms
#: every 15-25 s under load; Kafka's own start-script options (G1, `MaxGCPauseMillis=20`) made
#: those pauses no shorter on this 2-core machine (7-28 ms) but came every 3-4 s (`-Xlog:gc`,
#: 16,000 ev/s). Every client of the broker, input and output of every event alike, stood
#: still for each one: in a 50 ms event → served budget a fixed stall of 20-30 ms is most of
#: it. ZGC took no more of the broker's CPU (5.2-5.6 s against 6.0 s for the same 20 s step).
JVM_PERFORMANCE_OPTS: Final = ("-server", "-XX:+UseZGC", "-Djava.awt.headless=true")


class StackError(RuntimeError):
    """A local service could not be prepared or did not come up."""


@dataclass(frozen=True, slots=True)
class KafkaNodeLayout:
    """Where one KRaft node lives and listens, and the replication its cluster gives topics."""

    node_id: int
    home: Path
    port: int
    controller_port: int
    #: `id@host:port` of every controller of the quorum (this node's included)
    voters: str
    #: default, offsets and transaction-log replication factor (the cluster's size, at most 3)
    replication: int = 1
    min_isr: int = 1
    heap: str = "1g"
    #: how status output and logs name it
    name: str = "kafka"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def single_layout(settings: Settings) -> KafkaNodeLayout:
    """The single-profile node: one broker+controller under `<state dir>/kafka`."""
    return KafkaNodeLayout(
        node_id=1, home=settings.state_dir.resolve() / "kafka", port=settings.kafka_port,
        controller_port=settings.kafka_controller_port,
        voters=f"1@127.0.0.1:{settings.kafka_controller_port}", heap=settings.kafka_heap,
    )


def server_properties(settings: Settings, node: KafkaNodeLayout,
                      data_dir: Path | None = None) -> dict[str, str]:
    """server.properties of one node (pure: what `write_config` writes); data in `home/data`."""
    rf, isr = str(node.replication), str(node.min_isr)
    return {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": node.voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir or node.home / "data"),
        "num.partitions": str(settings.topic_partitions),
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        "group.initial.rebalance.delay.ms": "0",
        # Faust declares its changelog topics itself; everything else is created explicitly.
        "auto.create.topics.enable": "false",
        # A node that comes back must not lead before it has caught up (no unclean election).
        "unclean.leader.election.enable": "false",
        "log.retention.hours": "168",
        "num.io.threads": "2",
        "num.network.threads": "2",
    }


class KafkaNode:
    """One combined KRaft broker+controller whose data lives under the project's state dir.

    By default the single profile's node (settings' ports, `<state dir>/kafka`); the cluster
    profile (see kafka_cluster.py) runs three, each with its own `layout`.
    """

    def __init__(self, settings: Settings, layout: KafkaNodeLayout | None = None, *,
                 cluster_id: Callable[[], str] | None = None) -> None:
        self.settings = settings
        self.layout = single_layout(settings) if layout is None else layout
        #: the id storage is formatted with (a cluster's nodes share one); default: a new one
        self.cluster_id = cluster_id or new_cluster_id
        self.home = self.layout.home
        self.config = self.home / "server.properties"
        self.process = ManagedProcess(
            name=self.layout.name,
            pid_file=self.home / "kafka.pid",
            log_file=self.home / "logs" / "server.log",
            markers=(str(self.config),),
        )

    @property
    def name(self) -> str:
        return self.layout.name

    @property
    def address(self) -> str:
        """host:port of this node's broker listener."""
        return self.layout.address

    @property
    def ports(self) -> tuple[int, int]:
        return self.layout.port, self.layout.controller_port

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
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        props = server_properties(self.settings, self.layout, self.home / "data")
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.home / "log4j2.properties").write_text(_LOG4J2)

    def _java(self, main: str, *args: str) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise StackError("no JDK found: apt-get install -y openjdk-17-jre-headless")
        heap = self.layout.heap
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)  # a JVM whose -Xlog file cannot open does not start
        return [
            java, f"-Xms{heap}", f"-Xmx{heap}", *JVM_PERFORMANCE_OPTS,
            f"-Xlog:gc:file={logs / 'gc.log'}:uptime:filecount=2,filesize=8m",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={logs}",
            "-cp", f"{self.ensure_jars()}/*", main, *args,
        ]

    def ensure_formatted(self) -> None:
        """Format KRaft storage once; later starts reuse it (topics, offsets survive restarts)."""
        if (self.home / "data" / "meta.properties").exists():
            return
        cluster_id = self.cluster_id()
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
        answered, last = self._wait_answering(lambda: kafka_metadata_ok(self.address), timeout_s,
                                              exited=f"{self.name} exited during start-up")
        if not answered:
            raise StackError(
                f"{self.name} did not answer metadata on {self.address} within "
                f"{timeout_s:.0f}s ({last!r}). Log tail:\n{self.process.log_tail()}"
            )

    def _wait_answering(self, probe: Callable[[], Coroutine[Any, Any, object]], timeout_s: float, *,
                        exited: str) -> tuple[bool, Exception | None]:
        """Run `probe` every half second until it succeeds or `timeout_s` has passed: whether
        it succeeded, and its last failure. Raises StackError (`exited`, the log tail) when
        the broker's process exits meanwhile."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        # aiokafka logs every refused connection at ERROR; while waiting those are expected.
        quiet = logging.getLogger("aiokafka")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            while time.monotonic() < deadline:
                if self.process.exited():
                    raise StackError(f"{exited}. Log tail:\n{self.process.log_tail()}")
                try:
                    asyncio.run(probe())
                    return True, None
                except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                    last = exc
                    time.sleep(0.5)
        finally:
            quiet.setLevel(level)
        return False, last

    def stop(self) -> bool:
        """Stop our broker (SIGTERM: a clean shutdown keeps every log and offset)."""
        return self.process.stop(timeout_s=60.0)


def new_cluster_id() -> str:
    """A fresh KRaft cluster id (22 characters of url-safe base64, as kafka-storage makes)."""
    return urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


async def kafka_metadata_ok(bootstrap: str, timeout_s: float = 5.0) -> list[str]:
    """Fetch cluster metadata once; returns the topic names (raises when unreachable)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    await asyncio.wait_for(admin.start(), timeout_s)
    try:
        return await asyncio.wait_for(admin.list_topics(), timeout_s)
    finally:
        await admin.close()
