"""The raw Redis connection's reply routing, timeout and drop, on a fake transport (no network)."""

from __future__ import annotations

import asyncio
from typing import Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.action_service.raw_connection import RawConnection


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False
        self.protocol: Any = None

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


class FakeOpened:
    """What redis-py's Connection leaves after `connect()`: a writer holding the transport."""

    def __init__(self, transport: FakeTransport) -> None:
        self._transport = transport
        self._reader: Any = None
        self._writer: Any = None

    async def connect(self) -> None:
        self._reader = object()
        self._writer = type("W", (), {"transport": self._transport})()


async def _opened(timeout_s: float | None = 5.0) -> tuple[RawConnection, list[FakeTransport]]:
    transports: list[FakeTransport] = []

    def opener() -> Any:
        transports.append(FakeTransport())
        return FakeOpened(transports[-1])

    conn = RawConnection(opener, timeout_s)
    assert not conn.is_open()
    await conn.open()
    assert conn.is_open()
    return conn, transports


async def test_replies_go_to_their_callbacks_in_order_even_when_split():
    conn, transports = await _opened()
    got: list[Any] = []
    conn.send(hiredis.pack_command(("PING",)), got.append)
    conn.send(hiredis.pack_command(("EVALSHA", "x", "0")), got.append)
    assert transports[0].written[0] == hiredis.pack_command(("PING",))
    transports[0].protocol.data_received(b"+PONG\r\n-NOSCRIPT No matching")
    assert got == ["PONG"]
    transports[0].protocol.data_received(b" script.\r\n")
    assert isinstance(got[1], NoScriptError)


async def test_unexpected_reply_or_lost_connection_drops_and_fails_waiting_callbacks():
    conn, transports = await _opened()
    got: list[Any] = []
    transports[0].protocol.data_received(b"+OK\r\n")  # nobody asked
    assert transports[0].aborted and not conn.is_open()
    await conn.open()
    conn.send(b"x", got.append)
    conn.send(b"y", got.append)
    transports[1].protocol.connection_lost(None)
    assert [type(g) for g in got] == [RedisConnectionError, RedisConnectionError]
    transports[0].protocol.connection_lost(None)  # the old one closing late: no effect
    conn.send(b"z", got.append)  # closed: answered at once
    assert len(got) == 3 and isinstance(got[2], RedisConnectionError)


async def test_a_reply_that_does_not_come_in_time_times_out_every_waiting_call():
    conn, transports = await _opened(timeout_s=0.01)
    got: list[Any] = []
    both = asyncio.Event()

    def answered(result: Any) -> None:
        got.append(result)
        if len(got) == 2:
            both.set()

    conn.send(b"x", answered)
    conn.send(b"y", answered)
    await asyncio.wait_for(both.wait(), 5.0)  # the timer answers both
    assert [type(g) for g in got] == [RedisTimeoutError, RedisTimeoutError]
    assert transports[0].aborted
    assert not conn.is_open()
