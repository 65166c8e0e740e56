"""The apply batcher: every pending action goes to Redis in one script call per batch.

Handlers `submit` an action and await its future. Up to `lanes` batches are in flight at
once, each on a dedicated Redis connection. Submitting schedules one dispatch at the end of
the current event-loop pass, so every action submitted in that pass can share a call; a lane
that is free then takes everything pending (up to `max_batch`) and writes it as one EVALSHA,
right there, with no task. What arrives meanwhile waits for the next free lane. The reply is
handed to the batch from the connection's `data_received`, which resolves the handlers'
futures and sends the next batch on the freed lane in the same callback. At low load a batch
is one request, so nothing waits to fill a batch. With `appendfsync always` Redis fsyncs once
per event-loop pass for all clients anyway, so one call for many actions costs no durability:
no future resolves before Redis has answered.

A failure of the call (connection lost, timeout, out of memory) fails every action of that
batch with the same Redis error (the handlers answer 503). The script may or may not have run;
either way a retry is safe, it sees 200 for the keys that were applied.

With `wait_replicas` > 0 (a master with replicas), `WAIT wait_replicas wait_timeout_ms` is
written on the same connection right behind the script call, and the batch is resolved from
its reply: fewer replicas than asked fail the batch's created and replayed answers with
`NotReplicatedError` (503). On a single Redis without replicas it is 0: nothing more is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from app.action_service.apply_script import (
    ApplyResult,
    ScriptLimits,
    apply_script_source,
    pack_call,
    parse_reply,
    require_replicas,
    wait_command,
)
from app.actions.action import Action

logger = logging.getLogger(__name__)


class ScriptConnection(Protocol):
    """What a lane needs of its connection (`RawConnection`; tests pass fakes)."""

    def is_open(self) -> bool: ...

    async def open(self) -> None: ...

    def send(self, command: bytes, on_reply: Callable[[Any], None]) -> None:
        """Write `command`; `on_reply` is called once, in send order, with the reply or with
        the exception for it (error reply, lost connection, timeout)."""

    async def disconnect(self, nowait: bool = False) -> None: ...


class BatchObserver(Protocol):
    """Told about each script call: its batch size and Redis round-trip time."""

    def batch_done(self, size: int, seconds: float) -> None: ...


_Pending = tuple[Action, "asyncio.Future[ApplyResult]", "Callable[[], None] | None"]


class _Call:
    """One batch on one lane: its command, and what its reply resolves."""

    __slots__ = ("batch", "conn", "done", "load_error", "packed", "reloaded", "reply",
                 "stale_waits", "started")

    def __init__(self, conn: ScriptConnection, batch: list[_Pending]) -> None:
        self.conn = conn
        self.batch = batch
        self.packed = b""
        self.started = 0.0
        self.reloaded = False
        self.load_error: BaseException | None = None
        self.reply: Any = None
        self.stale_waits = 0  # WAIT replies to skip (the first send's, after a NOSCRIPT)
        self.done = False


def checked_wait(lanes: int, max_batch: int, wait_replicas: int, wait_timeout_ms: int) -> bytes:
    """Check a batcher's limits; the packed WAIT written after each script call (b"": none)."""
    if lanes < 1 or max_batch < 1:
        raise ValueError(f"need lanes >= 1 and max_batch >= 1, got {lanes} and {max_batch}")
    if wait_replicas < 0 or wait_timeout_ms < 0:
        raise ValueError("wait_replicas and wait_timeout_ms must be >= 0")
    return (hiredis.pack_command(wait_command(wait_replicas, wait_timeout_ms))
            if wait_replicas else b"")


class BatchQueue:
    """What both apply batchers share: the queue of submitted actions, their futures and
    limits. A subclass says when a lane is free (`_has_free_lane`) and sends what is pending
    (`_dispatch`)."""

    def __init__(
        self,
        limits: ScriptLimits,
        *,
        lanes: int,
        max_batch: int,
        observer: BatchObserver | None,
        wait_replicas: int,
        wait_timeout_ms: int,
    ) -> None:
        self._wait = checked_wait(lanes, max_batch, wait_replicas, wait_timeout_ms)
        self._limits = limits
        self._lanes = lanes
        self._max_batch = max_batch
        self._observer = observer
        self._wait_replicas = wait_replicas
        self._wait_timeout_ms = wait_timeout_ms
        self._pending: deque[_Pending] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._scheduled = False
        self._closed = False

    def submit(
        self, action: Action, settled: Callable[[], None] | None = None
    ) -> asyncio.Future[ApplyResult]:
        """Queue `action`; the future resolves when Redis has answered its batch (and WAIT).

        `settled` is called once Redis has answered (or the call failed), even if the future
        was cancelled meanwhile: the moment the action can no longer be running.
        """
        if self._closed:
            raise RuntimeError("the apply batcher is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ApplyResult] = loop.create_future()
        self._pending.append((action, future, settled))
        if not self._scheduled and self._has_free_lane():
            self._scheduled = True
            loop.call_soon(self._dispatch)
        return future

    async def apply(self, action: Action) -> ApplyResult:
        """Apply one action (queued with whatever else is pending)."""
        return await self.submit(action)

    def _has_free_lane(self) -> bool:
        raise NotImplementedError

    def _dispatch(self) -> None:
        raise NotImplementedError

    def _next_batch(self) -> list[_Pending]:
        """The oldest pending actions, up to `max_batch`, taken off the queue."""
        pending = self._pending
        return [pending.popleft() for _ in range(min(self._max_batch, len(pending)))]

    @staticmethod
    def _resolve(batch: list[_Pending], results: list[Any]) -> None:
        """Settle each action of `batch` and resolve its future (unless cancelled) with its
        result, or fail it with its exception."""
        for (_, future, settled), result in zip(batch, results, strict=True):
            if settled is not None:
                settled()
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _fail_queued(self) -> None:
        """At close: fail every action still queued (settled first)."""
        while self._pending:
            _, future, settled = self._pending.popleft()
            if settled is not None:
                settled()
            if not future.done():
                future.set_exception(RedisConnectionError("the action service is shutting down"))


class ApplyBatcher(BatchQueue):
    """Queues actions and applies them in batches over `lanes` dedicated connections."""

    def __init__(
        self,
        connect: Callable[[], ScriptConnection],
        limits: ScriptLimits,
        *,
        lanes: int,
        max_batch: int,
        observer: BatchObserver | None = None,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 0,
    ) -> None:
        super().__init__(limits, lanes=lanes, max_batch=max_batch, observer=observer,
                         wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)
        self._idle: list[ScriptConnection] = [connect() for _ in range(lanes)]
        self._all = list(self._idle)
        self._busy = 0
        self._drained: asyncio.Future[None] | None = None

    def _has_free_lane(self) -> bool:
        return bool(self._idle)

    def _dispatch(self) -> None:
        self._scheduled = False
        while self._idle and self._pending and not self._closed:
            batch = self._next_batch()
            call = _Call(self._idle.pop(), batch)
            self._busy += 1
            if call.conn.is_open():
                self._send(call)
            else:
                task = asyncio.get_running_loop().create_task(self._open_and_send(call))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _open_and_send(self, call: _Call) -> None:
        try:
            await call.conn.open()
        except Exception as exc:  # every action of the batch shares the failure
            self._finish(call, exc)
            return
        self._send(call)

    def _send(self, call: _Call) -> None:
        try:
            call.packed = pack_call([p[0] for p in call.batch], self._limits)
        except Exception as exc:
            self._finish(call, exc)
            return
        call.started = time.perf_counter()
        self._send_script(call)

    def _send_script(self, call: _Call) -> None:
        call.conn.send(call.packed, lambda reply: self._replied(call, reply))
        if self._wait:
            call.conn.send(self._wait, lambda acked: self._waited(call, acked))

    def _replied(self, call: _Call, reply: Any) -> None:
        """The script call's reply (or error); on NOSCRIPT (nothing ran: a restarted Redis)
        load the script and resend once, both written at once (Redis answers in order)."""
        if isinstance(reply, NoScriptError):
            if call.load_error is not None:
                reply = call.load_error
            elif not call.reloaded and call.conn.is_open():
                call.reloaded = True
                if self._wait:
                    call.stale_waits += 1
                call.conn.send(hiredis.pack_command(("SCRIPT", "LOAD", apply_script_source())),
                               lambda loaded: self._loaded(call, loaded))
                self._send_script(call)
                return
        if self._wait:
            call.reply = reply  # resolved by the WAIT reply that follows
        else:
            self._finish(call, reply)

    def _waited(self, call: _Call, acked: Any) -> None:
        """WAIT's reply (or error): the batch is resolved with the script's reply, its answers
        refused when fewer replicas than required have the writes."""
        if call.stale_waits:
            call.stale_waits -= 1
            return
        if call.done:
            return
        self._finish(call, call.reply, acked)

    @staticmethod
    def _loaded(call: _Call, reply: Any) -> None:
        if isinstance(reply, BaseException):
            call.load_error = reply  # the resent call then fails with it, not with NOSCRIPT

    def _finish(self, call: _Call, reply: Any, acked: Any = None) -> None:
        """Resolve the batch's futures, free its lane, and send what is pending on it.
        `acked`: WAIT's reply when one was sent (a count, or the error it got)."""
        call.done = True
        batch = call.batch
        results: list[Any]
        if isinstance(reply, BaseException):
            results = [reply] * len(batch)
        else:
            try:
                results = parse_reply(reply, len(batch))
            except Exception as exc:
                reply = exc
                results = [exc] * len(batch)
        if self._wait and not isinstance(reply, BaseException):
            if isinstance(acked, BaseException):
                reply = acked
                results = [acked] * len(batch)
            else:
                results = require_replicas(results, int(acked), self._wait_replicas,
                                           self._wait_timeout_ms)
        if isinstance(reply, BaseException):
            logger.warning("apply batch failed size=%d error=%s", len(batch),
                           type(reply).__name__)
        if self._observer is not None and call.started:
            self._observer.batch_done(len(batch), time.perf_counter() - call.started)
        self._resolve(batch, results)
        self._idle.append(call.conn)
        self._busy -= 1
        if self._closed:
            if self._busy == 0 and self._drained is not None and not self._drained.done():
                self._drained.set_result(None)
        elif self._pending:
            self._dispatch()

    async def close(self) -> None:
        """Let batches in flight finish, fail what is still queued, close the connections."""
        self._closed = True
        if self._busy:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        self._fail_queued()
        for conn in self._all:
            await conn.disconnect()
