"""Processes the harness spawns (workers, services): started with their env, ended by their PID
(app.stack.process.ChildProcess, with a worker's diagnostics pages)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from app.settings import Settings
from app.stack.process import ChildProcess, free_port, settings_env

__all__ = ["Spawned", "free_port", "http_ready", "kill_with_reads_uncommitted", "settings_env",
           "source_reads", "spawn_action_service", "spawn_worker", "wait_all_assigned",
           "wait_until"]

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], *, timeout_s: float, interval_s: float = 0.25,
               what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)  # poll interval of a deadline-bounded wait
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


class Spawned(ChildProcess):
    """A worker or service the harness started (its own session); stop() and kill() signal only
    its own PID. `port`: a worker's web port (its /debug pages)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path,
                 port: int | None = None, *, cwd: Path | None = None) -> None:
        super().__init__(argv, env, log_path, cwd=cwd)
        self.port = port

    def debug(self, page: str) -> dict[str, Any]:
        """A worker's diagnostics page (`consumer` or `tasks`), as JSON."""
        url = f"http://127.0.0.1:{self.port}/debug/{page}"
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback test URL
            return json.loads(resp.read())

    def dump_diagnostics(self, timeout_s: float = 5.0) -> None:
        """For a stuck worker: its /debug pages into `<log>.<page>.json`, then SIGUSR1, on
        which a Faust (mode) worker writes every thread's and task's stack to its log."""
        if not self.alive():
            return
        if self.port is not None:
            for page in ("consumer", "tasks"):
                with contextlib.suppress(OSError, ValueError):
                    self.log_path.with_suffix(f".{page}.json").write_text(
                        json.dumps(self.debug(page), indent=1))
        size = self.log_path.stat().st_size
        os.kill(self.proc.pid, signal.SIGUSR1)
        with contextlib.suppress(AssertionError):  # diagnostics only: never fail on it
            wait_until(lambda: self.log_path.stat().st_size > size, timeout_s=timeout_s,
                       what="a stack dump")


def spawn_worker(settings: Settings, tmp: Path, *, name: str = "worker",
                 dispatch: bool = True, args: Sequence[str] = (),
                 port: int | None = None, tree: Path | None = None) -> Spawned:
    """Start `fraudstream worker` for `settings` on a free web port, or on `port` (a dead
    worker's: its data directory, and so its local card store, is the same) (`args`: more
    options). `tree`: another checkout's worker instead (its code, its compiled extensions
    built in place, its shipped models), for a benchmark that runs two commits side by side."""
    port = port or free_port()
    argv = [sys.executable, "-m", "app.cli.main", "worker", "--web-port", str(port),
            "--loglevel", "INFO", "--dispatch" if dispatch else "--no-dispatch", *args]
    # the worker's data directory (worker-<port>) goes to the test's tmp dir, which pytest
    # prunes, not to the shared state directory
    env = settings_env(settings.replace(state_dir=tmp / "state"))
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        env["FRAUDSTREAM_MODEL_DIR"] = str(tree / "models")
    return Spawned(argv, env, tmp / f"{name}-{port}.log", port, cwd=tree)


def source_reads(worker: Spawned, topic: str) -> dict[str, int | None]:
    """The partitions of `topic` a worker owns, with the offset it last read of each
    (its /debug/consumer page)."""
    prefix = topic + ":"
    return {tp: part["read"] for tp, part in worker.debug("consumer")["partitions"].items()
            if tp.startswith(prefix)}


def wait_all_assigned(workers: Sequence[Spawned], topic: str, timeout_s: float = 120) -> None:
    """Wait until every worker owns partitions of `topic`: all of them are in the consumer
    group. A log replayed before that may be read whole by the first to join, and a fault
    aimed at a worker still joining hits one that holds nothing."""

    def all_assigned() -> bool:
        assert all(w.alive() for w in workers), "a worker died while joining the group"
        try:
            return all(source_reads(w, topic) for w in workers)
        except OSError:  # a web page not up yet
            return False

    wait_until(all_assigned, timeout_s=timeout_s, interval_s=0.2,
               what=f"every worker to own partitions of {topic}")


def kill_with_reads_uncommitted(settings: Settings, victim: Spawned, topic: str, *,
                                attempts: int = 50,
                                before_kill: Callable[[], None] | None = None,
                                open_in: str | None = None) -> tuple[int, int]:
    """exactly_once: SIGKILL `victim` while it has read messages of `topic` that its group's
    committed offsets (moved only by its transactions' commits) are not past yet: work in open
    transactions, which the partitions' next owner must abort and redo. What it has read is
    asked first (its /debug/consumer page), then it is frozen (SIGSTOP: it commits nothing
    more), given 200 ms for an EndTxn already on the wire, and killed only if the broker's
    committed offsets are still at or below a message it had read; else it resumes and the
    wait goes on. With `open_in` (an output topic), it is killed only when that topic also has,
    in one of the victim's partitions, a high watermark above the last stable offset at the
    freeze: an open transaction of the victim's holding records, which the next owner must
    abort (read_committed readers must never see them). `before_kill` runs just before the
    SIGKILL. Returns (partitions it owned, messages read past the commits)."""
    import asyncio

    from app.kafka.inspect import committed_offsets

    for _ in range(attempts):
        try:
            read = source_reads(victim, topic)
        except OSError:  # its web page busy: ask again
            time.sleep(0.02)
            continue
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(0.2)
        committed = asyncio.run(committed_offsets(settings, settings.app_id, topic))
        unfinished = sum(max(0, offset + 1 - committed.get(tp, 0))
                         for tp, offset in read.items() if offset is not None)
        if unfinished and open_in is not None:
            from app.kafka.inspect import open_transaction_partitions

            # its own partitions (outputs go to the source message's partition number): an
            # open transaction of another worker's would be committed, not aborted
            mine = {int(tp.rsplit(":", 1)[1]) for tp, o in read.items() if o is not None}
            if not mine & set(asyncio.run(open_transaction_partitions(settings, open_in))):
                unfinished = 0  # read past the commits, but nothing written yet: try again
        if unfinished:
            if before_kill is not None:
                before_kill()
            victim.kill()
            return sum(1 for o in read.values() if o is not None), unfinished
        os.kill(victim.pid, signal.SIGCONT)  # everything it read was committed: again
        time.sleep(0.05)
    raise AssertionError(f"worker {victim.port} never held read, uncommitted messages at a "
                         f"freeze ({attempts} tries)")


def spawn_action_service(settings: Settings, tmp: Path, *, port: int | None = None) -> Spawned:
    """Start `fraudstream action-service` for `settings` (port: settings' or the one given)."""
    port = port or settings.action_service_port
    argv = [sys.executable, "-m", "app.cli.main", "action-service", "--port", str(port)]
    return Spawned(argv, settings_env(settings), tmp / f"action-service-{port}.log")


def http_ready(url: str) -> bool:
    """True when GET `url` answers 200 (used with wait_until)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback test URL
            return resp.status == 200
    except OSError:
        return False
