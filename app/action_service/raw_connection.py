"""A lean Redis connection for the apply batcher: raw RESP on the transport, replies by hiredis.

redis-py opens it (TLS, AUTH, SELECT exactly as the service's client is configured); from then
on the batcher's packed commands are written straight to the transport and the replies parsed
in `data_received`, without redis-py's per-command health check, timeout context managers and
stream reader. A reply that does not come within the timeout, a lost connection or unparseable
bytes close the connection (a late reply can never be taken for the next call's); the next call
opens a new one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


class _Replies(asyncio.Protocol):
    """The transport's protocol once the connection is open: hands bytes to its connection."""

    def __init__(self, owner: RawConnection) -> None:
        self._owner = owner

    def data_received(self, data: bytes) -> None:
        self._owner._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._lost(exc)


class RawConnection:
    """One dedicated Redis connection speaking RESP directly (a `ScriptConnection`)."""

    def __init__(self, opener: Callable[[], AbstractConnection], timeout_s: float | None) -> None:
        self._opener = opener
        self._timeout_s = timeout_s
        self._transport: asyncio.Transport | None = None
        self._parser = hiredis.Reader(encoding="utf-8")
        self._replies: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._streams: tuple[object, object] | None = None

    async def send_packed_command(self, command: bytes, check_health: bool = True) -> None:
        """Write one packed command, opening the connection first if it is not open."""
        if self._transport is None or self._transport.is_closing():
            await self._open()
        assert self._transport is not None
        self._transport.write(command)

    async def read_response(self) -> Any:
        """The next reply; an error reply is raised as redis-py's exception for it."""
        if not self._replies:
            if self._transport is None:
                raise RedisConnectionError("Connection closed by server.")
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = (loop.call_later(self._timeout_s, self._timed_out, waiter)
                     if self._timeout_s else None)
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        reply = self._replies.popleft()
        if isinstance(reply, hiredis.ReplyError):
            raise BaseParser.parse_error(str(reply))
        return reply

    async def disconnect(self, nowait: bool = False) -> None:
        """Close the connection (a later command opens a new one)."""
        self._drop(RedisConnectionError("Connection closed by client."))

    async def _open(self) -> None:
        conn = self._opener()
        await conn.connect()  # redis-py's handshake: TLS, AUTH, SELECT, as configured
        transport = conn._writer.transport  # type: ignore[union-attr]  # noqa: SLF001
        # The transport is ours now: redis-py's Connection must not close it when collected,
        # and its streams are kept (a collected StreamWriter closes its transport).
        self._streams = (conn._reader, conn._writer)  # noqa: SLF001
        conn._writer = conn._reader = None  # noqa: SLF001
        self._parser = hiredis.Reader(encoding="utf-8")
        self._replies.clear()
        transport.set_protocol(_Replies(self))
        self._transport = transport  # type: ignore[assignment]

    def _received(self, data: bytes) -> None:
        self._parser.feed(data)
        try:
            while (reply := self._parser.gets()) is not False:
                self._replies.append(reply)
        except hiredis.ProtocolError as exc:
            self._drop(RedisConnectionError(f"Protocol error from Redis: {exc}"))
            return
        waiter = self._waiter
        if self._replies and waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _lost(self, exc: Exception | None) -> None:
        self._drop(RedisConnectionError("Connection closed by server."))

    def _timed_out(self, waiter: asyncio.Future[None]) -> None:
        if waiter is self._waiter:
            self._drop(RedisTimeoutError("Timeout reading from Redis"))

    def _drop(self, error: Exception) -> None:
        """Forget the connection: fail the waiting read, drop unread replies, close."""
        transport, self._transport = self._transport, None
        self._replies.clear()
        if transport is not None:
            transport.abort()
        self._streams = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
