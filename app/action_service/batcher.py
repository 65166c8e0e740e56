"""The apply batcher: every pending action goes to Redis in one script call per batch.

Handlers `submit` an action and await its future. Up to `lanes` batches are in flight at
once, each on a dedicated Redis connection. A lane that is free takes everything pending (up
to `max_batch`) and sends it as one EVALSHA; what arrives meanwhile waits for the next free
lane. At low load a batch is one request, so nothing waits to fill a batch. With
`appendfsync always` Redis fsyncs once per event-loop pass for all clients anyway, so one call
for many actions costs no durability: no future resolves before Redis has answered.

A failure of the call (connection lost, timeout, out of memory) fails every action of that
batch with the same Redis error (the handlers answer 503). The script may or may not have run;
either way a retry is safe, it sees 200 for the keys that were applied.
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
)
from app.actions.action import Action

logger = logging.getLogger(__name__)


class ScriptConnection(Protocol):
    """The part of `redis.asyncio.Connection` a lane uses (tests may pass fakes)."""

    async def send_packed_command(self, command: bytes, check_health: bool = True) -> None: ...

    async def read_response(self) -> Any: ...

    async def disconnect(self, nowait: bool = False) -> None: ...


class BatchObserver(Protocol):
    """Told about each script call: its batch size and Redis round-trip time."""

    def batch_done(self, size: int, seconds: float) -> None: ...


_Pending = tuple[Action, "asyncio.Future[ApplyResult]", "Callable[[], None] | None"]


class ApplyBatcher:
    """Queues actions and applies them in batches over `lanes` dedicated connections."""

    def __init__(
        self,
        connect: Callable[[], ScriptConnection],
        limits: ScriptLimits,
        *,
        lanes: int,
        max_batch: int,
        observer: BatchObserver | None = None,
    ) -> None:
        if lanes < 1 or max_batch < 1:
            raise ValueError(f"need lanes >= 1 and max_batch >= 1, got {lanes} and {max_batch}")
        self._limits = limits
        self._max_batch = max_batch
        self._observer = observer
        self._pending: deque[_Pending] = deque()
        self._idle: list[ScriptConnection] = [connect() for _ in range(lanes)]
        self._all = list(self._idle)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def submit(
        self, action: Action, settled: Callable[[], None] | None = None
    ) -> asyncio.Future[ApplyResult]:
        """Queue `action`; the future resolves when Redis has answered its batch.

        `settled` is called once Redis has answered (or the call failed), even if the future
        was cancelled meanwhile: the moment the action can no longer be running.
        """
        if self._closed:
            raise RuntimeError("the apply batcher is closed")
        future: asyncio.Future[ApplyResult] = asyncio.get_running_loop().create_future()
        self._pending.append((action, future, settled))
        self._dispatch()
        return future

    async def apply(self, action: Action) -> ApplyResult:
        """Apply one action (queued with whatever else is pending)."""
        return await self.submit(action)

    def _dispatch(self) -> None:
        while self._idle and self._pending:
            batch = [self._pending.popleft()
                     for _ in range(min(self._max_batch, len(self._pending)))]
            task = asyncio.get_running_loop().create_task(self._flush(self._idle.pop(), batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _flush(self, conn: ScriptConnection, batch: list[_Pending]) -> None:
        try:
            started = time.perf_counter()
            try:
                reply = await self._call(conn, pack_call([p[0] for p in batch], self._limits))
                results: list[Any] = parse_reply(reply, len(batch))
            except Exception as exc:  # every action of the batch shares the failure
                logger.warning("apply batch failed size=%d error=%s", len(batch),
                               type(exc).__name__)
                results = [exc] * len(batch)
            if self._observer is not None:
                self._observer.batch_done(len(batch), time.perf_counter() - started)
            for (_, future, settled), result in zip(batch, results, strict=True):
                if settled is not None:
                    settled()
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)
        finally:
            self._idle.append(conn)
            if not self._closed:
                self._dispatch()

    @staticmethod
    async def _call(conn: ScriptConnection, packed: bytes) -> Any:
        """EVALSHA; on NOSCRIPT (nothing ran: a restarted Redis) load the script and resend."""
        await conn.send_packed_command(packed)
        try:
            return await conn.read_response()
        except NoScriptError:
            await conn.send_packed_command(
                hiredis.pack_command(("SCRIPT", "LOAD", apply_script_source()))
            )
            await conn.read_response()
            await conn.send_packed_command(packed)
            return await conn.read_response()

    async def close(self) -> None:
        """Let batches in flight finish, fail what is still queued, close the connections."""
        self._closed = True
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        while self._pending:
            _, future, settled = self._pending.popleft()
            if settled is not None:
                settled()
            if not future.done():
                future.set_exception(RedisConnectionError("the action service is shutting down"))
        for conn in self._all:
            await conn.disconnect()
