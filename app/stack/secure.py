"""The secure local profile: Kafka on SASL_SSL (SCRAM-SHA-512 and PLAIN), Redis on TLS with an ACL
user, certificates from a local CA and generated secrets, all under the state dir."""

from __future__ import annotations

import asyncio
import logging
import secrets
import subprocess
import uuid
from base64 import urlsafe_b64encode
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import redis

from app.keyspace import KEY_PATTERNS
from app.settings import Settings
from app.stack.certs import CertFiles, ensure_certs
from app.stack.kafka import KafkaNode, StackError
from app.stack.manager import Stack
from app.stack.process import ManagedProcess
from app.stack.redis import RedisNode

log = logging.getLogger(__name__)

#: Kafka and Redis user of every fraudstream client (replay, workers, action service, CLI).
CLIENT_USER: Final = "fraudstream"
#: Kafka's own inter-broker user; Redis's `default` user is the operator's.
KAFKA_ADMIN_USER: Final = "admin"

#: Exactly what the action service sends: the apply script (EVALSHA, SCRIPT LOAD on NOSCRIPT,
#: and the commands it calls), WAIT behind it when replicas must acknowledge, the reads (GET of
#: a key's claim, MULTI/EXEC pipelines), PING for /readyz, and the label outbox's forwarder
#: (consumer groups on `labels:*`), and the review queue (its streams and sorted sets).
SERVICE_REDIS_COMMANDS: Final = (
    "ping", "evalsha", "eval", "script|load", "multi", "exec",
    "hgetall", "pttl", "lrange", "wait", "get", "set",
    "time", "type", "hmget", "hget", "hset", "hincrby", "xadd", "rpush", "ltrim", "pexpire",
    "xgroup|create", "xreadgroup", "xack", "xdel", "xautoclaim",
    "xrange", "zadd", "zrem", "zrange", "zcard",
)
#: Key patterns of every key the service writes (from the key layout: shard-tagged names).
SERVICE_REDIS_KEYS: Final = KEY_PATTERNS


@dataclass(frozen=True, slots=True)
class SecureProfile:
    """Certificates and secret files of the secure profile (created once, mode 0600)."""

    directory: Path

    @classmethod
    def for_settings(cls, settings: Settings) -> SecureProfile:
        return cls(settings.state_dir.resolve() / "secure")

    @property
    def certs(self) -> CertFiles:
        return CertFiles(self.directory / "certs")

    def secret_file(self, name: str) -> Path:
        return self.directory / "secrets" / name

    def ensure(self) -> SecureProfile:
        """Create the CA, certificates and every secret that is missing; idempotent."""
        ensure_certs(self.certs.directory)
        folder = self.directory / "secrets"
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        for name in ("kafka-admin-password", "kafka-client-password", "redis-admin-password",
                     "redis-client-password", "action-tokens"):
            path = self.secret_file(name)
            if not path.exists():
                path.touch(mode=0o600)
                path.write_text(secrets.token_urlsafe(24) + "\n")
        return self

    def read(self, name: str) -> str:
        return self.secret_file(name).read_text().strip()

    def client_settings(self, settings: Settings) -> Settings:
        """`settings` pointed at the secure local Kafka and Redis, secrets read from files."""
        return settings.replace(
            kafka_bootstrap=settings.local_kafka_bootstrap,
            kafka_security_protocol="SASL_SSL",
            kafka_ssl_cafile=self.certs.ca,
            kafka_sasl_username=CLIENT_USER,
            kafka_sasl_password_file=self.secret_file("kafka-client-password"),
            redis_url=f"rediss://127.0.0.1:{settings.redis_port}/0",
            redis_ssl_ca_file=self.certs.ca,
            redis_username=CLIENT_USER,
            redis_password_file=self.secret_file("redis-client-password"),
            action_token_file=self.secret_file("action-tokens"),
        )

    def env_lines(self, settings: Settings) -> list[str]:
        """`export` lines for clients of the secure stack (file paths only, never secrets)."""
        s = self.client_settings(settings)
        return [
            f"export KAFKA_BOOTSTRAP={s.kafka_bootstrap}",
            "export FRAUDSTREAM_KAFKA_SECURITY_PROTOCOL=SASL_SSL",
            f"export FRAUDSTREAM_KAFKA_SASL_MECHANISM={s.kafka_sasl_mechanism}",
            f"export FRAUDSTREAM_KAFKA_SSL_CAFILE={s.kafka_ssl_cafile}",
            f"export FRAUDSTREAM_KAFKA_SASL_USERNAME={CLIENT_USER}",
            f"export FRAUDSTREAM_KAFKA_SASL_PASSWORD_FILE={s.kafka_sasl_password_file}",
            f"export REDIS_URL={s.redis_url}",
            f"export FRAUDSTREAM_REDIS_SSL_CA_FILE={s.redis_ssl_ca_file}",
            f"export FRAUDSTREAM_REDIS_USERNAME={CLIENT_USER}",
            f"export FRAUDSTREAM_REDIS_PASSWORD_FILE={s.redis_password_file}",
            f"export FRAUDSTREAM_ACTION_TOKEN_FILE={s.action_token_file}",
        ]


def _jaas(module: str, user: str, password: str, extra: str = "") -> str:
    return f'{module} required username="{user}" password="{password}"{extra};'


class SecureKafkaNode(KafkaNode):
    """The local broker with one SASL_SSL listener (SCRAM-SHA-512 and PLAIN) and TLS from the CA."""

    def __init__(self, settings: Settings, profile: SecureProfile) -> None:
        super().__init__(settings)
        self.profile = profile
        self.home = settings.state_dir.resolve() / "kafka-secure"
        self.config = self.home / "server.properties"
        self.process = ManagedProcess(name="kafka-secure", pid_file=self.home / "kafka.pid",
                                      log_file=self.home / "logs" / "server.log",
                                      markers=(str(self.config),))

    def write_config(self) -> None:
        super().write_config()
        s, p, certs = self.settings, self.profile, self.profile.certs
        props = dict(line.split("=", 1) for line in self.config.read_text().splitlines() if line)
        admin, client = p.read("kafka-admin-password"), p.read("kafka-client-password")
        props.update({
            "listeners": f"SASL_SSL://127.0.0.1:{s.kafka_port},"
                         f"CONTROLLER://127.0.0.1:{s.kafka_controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{s.kafka_port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas(
                "org.apache.kafka.common.security.scram.ScramLoginModule", KAFKA_ADMIN_USER, admin),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": _jaas(
                "org.apache.kafka.common.security.plain.PlainLoginModule", KAFKA_ADMIN_USER, admin,
                f' user_{KAFKA_ADMIN_USER}="{admin}" user_{CLIENT_USER}="{client}"'),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": "none",
        })
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.config.chmod(0o600)  # it holds the PLAIN passwords

    def ensure_formatted(self) -> None:
        """Format KRaft storage with the SCRAM users (they live in the metadata log)."""
        if (self.home / "data" / "meta.properties").exists():
            return
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        scram = []
        for user, secret in ((KAFKA_ADMIN_USER, "kafka-admin-password"),
                             (CLIENT_USER, "kafka-client-password")):
            scram += ["--add-scram",
                      f"SCRAM-SHA-512=[name={user},password={self.profile.read(secret)}]"]
        proc = subprocess.run(  # noqa: S603
            # `=`: a generated id may start with "-", which argparse would take for an option
            self._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                       "-c", str(self.config), *scram),
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr).replace(self.profile.read("kafka-client-password"), "***")
            raise StackError(f"formatting secure Kafka storage failed:\n{out[-3000:]}")

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Block until the broker answers metadata over SASL_SSL, or raise with the log tail."""
        from app.kafka.inspect import admin_client

        async def probe() -> None:
            async with admin_client(self.profile.client_settings(self.settings),
                                    timeout_s=5.0) as admin:
                await asyncio.wait_for(admin.list_topics(), 5.0)

        answered, last = self._wait_answering(probe, timeout_s, exited="secure Kafka exited")
        if not answered:
            raise StackError(f"secure Kafka did not answer within {timeout_s:.0f}s ({last!r}).\n"
                             f"Log tail:\n{self.process.log_tail()}")


class SecureRedisNode(RedisNode):
    """redis-server on TLS only (no plaintext port), `default` user with a password, and the
    service's ACL user allowed only its commands and keys."""

    def __init__(self, settings: Settings, profile: SecureProfile) -> None:
        super().__init__(settings)
        self.profile = profile
        self.home = settings.state_dir.resolve() / "redis-secure"
        self.config = self.home / "redis.conf"
        self.process = ManagedProcess(name="redis-secure", pid_file=self.home / "redis.pid",
                                      log_file=self.home / "redis.log",
                                      markers=(str(self.config),))

    def write_config(self) -> None:
        super().write_config()
        s, p, certs = self.settings, self.profile, self.profile.certs
        lines = [line for line in self.config.read_text().splitlines()
                 if not line.startswith("port ")]
        commands = " ".join(f"+{c}" for c in SERVICE_REDIS_COMMANDS)
        keys = " ".join(f"~{k}" for k in SERVICE_REDIS_KEYS)
        lines += [
            "port 0",
            f"tls-port {s.redis_port}",
            f"tls-cert-file {certs.server_cert}",
            f"tls-key-file {certs.server_key}",
            f"tls-ca-cert-file {certs.ca}",
            "tls-auth-clients no",
            f"user default on >{p.read('redis-admin-password')} ~* &* +@all",
            f"user {CLIENT_USER} on >{p.read('redis-client-password')} resetkeys {keys} "
            f"resetchannels -@all {commands}",
            "",
        ]
        self.config.write_text("\n".join(lines))
        self.config.chmod(0o600)

    def admin_client(self) -> redis.Redis:
        """The operator's client (user `default`): tests and `stack` use it, never the service."""
        return redis.Redis(host="127.0.0.1", port=self.settings.redis_port, ssl=True,
                           ssl_ca_certs=str(self.profile.certs.ca),
                           password=self.profile.read("redis-admin-password"),
                           socket_timeout=2, decode_responses=True)


class SecureStack(Stack):
    """`Stack` on the secure profile: same lifecycle, secure nodes, client settings with TLS."""

    def __init__(self, settings: Settings) -> None:
        settings = settings.replace(stack_profile="single")  # one secure node of each
        self.profile = SecureProfile.for_settings(settings).ensure()
        super().__init__(self.profile.client_settings(settings))
        self.kafka = SecureKafkaNode(self.settings, self.profile)
        self.redis = SecureRedisNode(self.settings, self.profile)

    @property
    def manages_redis(self) -> bool:
        return True

    def env_lines(self) -> list[str]:
        return self.profile.env_lines(self.settings)
