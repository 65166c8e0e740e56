"""The action service's shutdown never waits for ever on its label forwarder, and a client
start honours a cancellation that lands as it completes."""

from __future__ import annotations

import asyncio
import logging

import pytest

import app.kafka.inspect
from app.action_service.app import stop_task


async def _swallows_one_cancellation(started: asyncio.Event) -> None:
    """What a task caught in 3.11's wait_for race does: its first cancellation is lost."""
    started.set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass
    await asyncio.sleep(3600)


async def test_a_task_that_stops_is_waited_for_one_that_does_not_is_left_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()
    stuck = asyncio.create_task(_swallows_one_cancellation(started), name="stuck")
    await started.wait()
    with caplog.at_level(logging.WARNING, logger="app.action_service.app"):
        assert await stop_task(stuck, 0.2) is False
    assert "stuck did not stop within 0.2 s" in caplog.text
    assert not stuck.done()
    stuck.cancel()  # the second cancellation reaches it
    with pytest.raises(asyncio.CancelledError):
        await stuck

    plain = asyncio.create_task(asyncio.sleep(3600), name="plain")
    await asyncio.sleep(0)
    assert await stop_task(plain, 5.0) is True
    assert plain.cancelled()


class _Client:
    """A client whose start completes as its task is cancelled (the 3.11 wait_for race)."""

    def __init__(self) -> None:
        self.closed = 0
        self.owner: asyncio.Task[None]

    async def start(self) -> None:
        asyncio.get_running_loop().call_soon(self.owner.cancel)  # lands before start's result

    async def stop(self) -> None:
        self.closed += 1


async def test_start_or_close_honours_a_cancellation_that_lands_as_the_start_completes() -> None:
    client = _Client()

    async def starter() -> None:
        await app.kafka.inspect.start_or_close(client, timeout_s=5.0)

    client.owner = asyncio.create_task(starter())
    with pytest.raises(asyncio.CancelledError):
        await client.owner
    assert client.closed == 1  # closed, as any start that does not complete


async def test_a_start_without_cancellation_is_left_running() -> None:
    client = _Client()
    client.owner = asyncio.create_task(asyncio.sleep(3600))  # someone else's task
    await app.kafka.inspect.start_or_close(client, timeout_s=5.0)
    assert client.closed == 0
    client.owner.cancel()
