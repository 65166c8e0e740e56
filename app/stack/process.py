"""The processes we start, ended by their own PID only: local services tracked by a pid file
(ManagedProcess) and children held by their handle (ChildProcess: workers, the action service)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.settings import Settings, settings_environ

log = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process load exactly `settings` (output unbuffered,
    so its log is current)."""
    env = settings_environ(settings)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True, slots=True)
class ManagedProcess:
    """One service process: its pid file, its log, and proof that a pid is really ours.

    The pid file holds the pid and the process's start time (from /proc/PID/stat): a pid file
    left over from a crashed run whose pid was reused by another program is never signalled,
    because that program started at another time. (A command-line check is not enough: servers
    such as redis-server rewrite their command line while starting.) `markers` name what the
    process's command line shows, for status output and diagnostics.
    """

    name: str
    pid_file: Path
    log_file: Path
    markers: tuple[str, ...]

    def pid(self) -> int | None:
        """The pid of our running process, or None (stale pid files are removed)."""
        try:
            pid_text, started_text = self.pid_file.read_text().split()
            pid, started = int(pid_text), int(started_text)
        except (FileNotFoundError, ValueError):
            return None
        if _start_time(pid) == started and not _is_zombie(pid):
            return pid
        with contextlib.suppress(FileNotFoundError):
            self.pid_file.unlink()
        return None

    def start(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> int:
        """Start `argv` detached (own session) with output appended to the log; record its pid."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(  # noqa: S603 - argv is built by us, not from input
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        started = _start_time(proc.pid)
        if started is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise RuntimeError(f"{self.name} exited at once: see {self.log_file}")
        self.pid_file.write_text(f"{proc.pid} {started}\n")
        log.info("started %s pid=%d", self.name, proc.pid)
        return proc.pid

    def exited(self) -> bool:
        """True when the process we recorded is gone (it died or was never started)."""
        return self.pid() is None

    def stop(self, *, timeout_s: float = 30.0, sig: signal.Signals = signal.SIGTERM) -> bool:
        """Signal our process (by pid only), wait for it to exit, SIGKILL after the timeout."""
        pid = self.pid()
        if pid is None:
            return False
        terminate(pid, self.name, timeout_s=timeout_s, sig=sig)
        with contextlib.suppress(FileNotFoundError):
            self.pid_file.unlink()
        return True

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the service's log, for error messages."""
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log yet)"
        return "\n".join(text.splitlines()[-lines:])


class ChildProcess:
    """A child process we started and hold: output appended to `log_path`, in its own session
    (`new_session` False: Ctrl-C in our terminal reaches it too); signalled by its PID only."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log_path: Path, *,
                 new_session: bool = True, cwd: Path | None = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(  # noqa: S603 - argv is built by us, not from input
            list(argv), env=env, stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=new_session, cwd=cwd)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the crash case (no clean shutdown, no final commit)."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM and wait (clean shutdown), SIGKILL after the timeout."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(Exception):
            self._log.close()

    def log_tail(self, n: int = 40) -> str:
        """The last `n` lines of its log."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def terminate(pid: int, name: str, *, timeout_s: float,
              sig: signal.Signals = signal.SIGTERM) -> None:
    """Signal `pid` (one we know is ours), wait for it to exit, SIGKILL after the timeout."""
    os.kill(pid, sig)
    if not _wait_gone(pid, timeout_s):
        log.warning("%s pid=%d ignored %s for %.0fs; killing", name, pid, sig.name, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 10.0)


def command_shows(pid: int, markers: Sequence[str]) -> bool:
    """True when `pid` runs and its command line shows one of `markers` (not a reused PID)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return any(m.encode() in raw for m in markers)


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # fields after the parenthesised command name; starttime is field 22 overall
    return int(stat.rsplit(")", 1)[-1].split()[19])


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    # The state letter follows the parenthesised command name.
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap if it is our child
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return True
        time.sleep(0.1)
    return False
