"""The local Redis: Debian's redis-server with AOF on, its own port and data directory."""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from app.settings import Settings
from app.stack.kafka import StackError
from app.stack.process import ManagedProcess

log = logging.getLogger(__name__)


def ensure_redis_server() -> str:
    """Path of redis-server, installing Debian's package when it is missing (we run as root)."""
    found = shutil.which("redis-server")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        raise StackError("redis-server is not installed and apt-get is unavailable")
    log.warning("redis-server not found: installing Debian's redis-server package")
    for args in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "redis-server"]):
        proc = subprocess.run(args, capture_output=True, text=True, check=False)  # noqa: S603
        if proc.returncode != 0:
            raise StackError(f"{' '.join(args)} failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
    found = shutil.which("redis-server")
    if not found:
        raise StackError("redis-server still missing after apt-get install")
    return found


class RedisNode:
    """A redis-server started with the project's config: AOF on, fsync policy from settings.

    By default the stack's single node (settings' port, `<state dir>/redis`); a Redis Cluster
    (see redis_cluster.py) runs several, each with its own `name`, `home`, `port` and the
    cluster lines in `extra_config`.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        name: str = "redis",
        home: Path | None = None,
        port: int | None = None,
        extra_config: Sequence[str] = (),
    ) -> None:
        self.settings = settings
        self.port = settings.redis_port if port is None else port
        self.home = (settings.state_dir.resolve() / "redis") if home is None else home.resolve()
        self.config = self.home / "redis.conf"
        self.extra_config = tuple(extra_config)
        self.process = ManagedProcess(
            name=name,
            pid_file=self.home / "redis.pid",
            log_file=self.home / "redis.log",
            markers=(str(self.config), f"127.0.0.1:{self.port}"),
        )

    @property
    def url(self) -> str:
        """redis:// URL of this node (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def write_config(self) -> None:
        """Write redis.conf (idempotent)."""
        s = self.settings
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    f"port {self.port}",
                    f"dir {self.home / 'data'}",
                    "daemonize no",
                    "appendonly yes",
                    f"appendfsync {s.redis_appendfsync}",
                    'save ""',
                    "loglevel notice",
                    "maxmemory-policy noeviction",
                    *self.extra_config,
                    "",
                ]
            )
        )

    def start(self) -> bool:
        """Start redis-server unless ours already runs; True when this call started it."""
        if self.process.pid() is not None:
            return False
        binary = ensure_redis_server()
        self.write_config()
        # redis-server retitles itself "redis-server 127.0.0.1:PORT", which is the pid-check marker.
        self.process.start([binary, str(self.config)])
        return True

    def admin_client(self) -> redis.Redis:
        """A client of our own redis-server (the readiness probe)."""
        return redis.Redis.from_url(self.url, socket_timeout=2)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until PING answers, or raise with the log tail."""
        deadline = time.monotonic() + timeout_s
        client = self.admin_client()
        last: Exception | None = None
        try:
            while time.monotonic() < deadline:
                if self.process.exited():
                    raise StackError(f"redis-server exited. Log tail:\n{self.process.log_tail()}")
                try:
                    if client.ping():
                        return
                except redis.RedisError as exc:
                    last = exc
                time.sleep(0.2)
        finally:
            client.close()
        raise StackError(f"Redis did not answer PING within {timeout_s:.0f}s ({last!r}).\n"
                         f"Log tail:\n{self.process.log_tail()}")

    def stop(self) -> bool:
        """Stop our redis-server (SIGTERM: it fsyncs the AOF and exits)."""
        return self.process.stop(timeout_s=30.0)
