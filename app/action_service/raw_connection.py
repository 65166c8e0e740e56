"""A lean Redis connection for the apply batcher: raw RESP on the transport, replies by hiredis.

redis-py opens it (TLS, AUTH, SELECT exactly as the service's client is configured); from then
on the batcher's packed commands are written straight to the transport and each reply is handed
to the callback given with its command, from `data_received`, in the order sent: no task, no
future and no extra event-loop pass per call. A reply that does not come within the timeout, a
lost connection or unparseable bytes close the connection and hand every waiting callback the
error (a late reply can never be taken for the next call's); the next call opens a new one.
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

    def __init__(self, owner: RawConnection, transport: asyncio.BaseTransport) -> None:
        self._owner = owner
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._owner._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._lost(self._transport)


#: Called with a command's reply, or with the exception for it (an error reply as redis-py's
#: exception for it, a lost connection, a timeout). It must not raise.
ReplyCallback = Callable[[Any], None]


class RawConnection:
    """One dedicated Redis connection speaking RESP directly (a `ScriptConnection`)."""

    def __init__(self, opener: Callable[[], AbstractConnection], timeout_s: float | None) -> None:
        self._opener = opener
        self._timeout_s = timeout_s
        self._transport: asyncio.Transport | None = None
        self._parser = hiredis.Reader(encoding="utf-8")
        self._callbacks: deque[ReplyCallback] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._streams: tuple[object, object] | None = None

    def is_open(self) -> bool:
        """True when `send` may be called now (else `open` first)."""
        return self._transport is not None and not self._transport.is_closing()

    async def open(self) -> None:
        """Open the connection: redis-py's handshake (TLS, AUTH, SELECT, as configured)."""
        conn = self._opener()
        await conn.connect()
        transport = conn._writer.transport  # type: ignore[union-attr]  # noqa: SLF001
        # The transport is ours now: redis-py's Connection must not close it when collected,
        # and its streams are kept (a collected StreamWriter closes its transport).
        self._streams = (conn._reader, conn._writer)  # noqa: SLF001
        conn._writer = conn._reader = None  # noqa: SLF001
        self._parser = hiredis.Reader(encoding="utf-8")
        self._callbacks.clear()
        transport.set_protocol(_Replies(self, transport))
        self._transport = transport  # type: ignore[assignment]

    def send(self, command: bytes, on_reply: ReplyCallback) -> None:
        """Write one packed command; `on_reply` gets its reply (or error) exactly once."""
        transport = self._transport
        if transport is None or transport.is_closing():
            on_reply(RedisConnectionError("Connection closed."))
            return
        self._callbacks.append(on_reply)
        if self._timer is None and self._timeout_s:
            self._timer = asyncio.get_running_loop().call_later(self._timeout_s, self._timed_out)
        transport.write(command)

    async def disconnect(self, nowait: bool = False) -> None:
        """Close the connection (a later command opens a new one)."""
        self._drop(RedisConnectionError("Connection closed by client."))

    def _received(self, data: bytes) -> None:
        self._parser.feed(data)
        callbacks = self._callbacks
        while True:
            try:
                reply = self._parser.gets()
            except hiredis.ProtocolError as exc:
                self._drop(RedisConnectionError(f"Protocol error from Redis: {exc}"))
                return
            if reply is False:
                break
            if not callbacks:  # a reply nobody asked for: the stream is out of step
                self._drop(RedisConnectionError("Protocol error from Redis: unexpected reply"))
                return
            if self._timer is not None:  # the next reply gets a full timeout of its own
                self._timer.cancel()
                self._timer = None
                if len(callbacks) > 1 and self._timeout_s:
                    self._timer = asyncio.get_running_loop().call_later(
                        self._timeout_s, self._timed_out)
            on_reply = callbacks.popleft()
            if isinstance(reply, hiredis.ReplyError):
                reply = BaseParser.parse_error(str(reply))
            on_reply(reply)

    def _lost(self, transport: asyncio.BaseTransport) -> None:
        if transport is self._transport:  # not a connection dropped earlier, closing late
            self._drop(RedisConnectionError("Connection closed by server."))

    def _timed_out(self) -> None:
        self._timer = None
        self._drop(RedisTimeoutError("Timeout reading from Redis"))

    def _drop(self, error: Exception) -> None:
        """Forget the connection: close it, hand every waiting callback `error`."""
        transport, self._transport = self._transport, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if transport is not None:
            transport.abort()
        self._streams = None
        waiting = list(self._callbacks)
        self._callbacks.clear()
        for on_reply in waiting:
            on_reply(error)
