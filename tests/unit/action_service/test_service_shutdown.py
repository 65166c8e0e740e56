"""The action service's shutdown never waits for ever on its label forwarder."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import app.kafka.inspect
from app.action_service import label_outbox
from app.action_service.app import stop_task
from app.settings import load_settings


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


class _Producer:
    stopped = 0

    def __init__(self, **_kwargs: Any) -> None:  # noqa: ANN401
        pass

    async def stop(self) -> None:
        _Producer.stopped += 1


async def _start_while_cancelled(client: Any, *, timeout_s: float | None = None) -> None:  # noqa: ANN401
    """The start completes as the task is cancelled, and wait_for returns its result (3.11)."""
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        pass  # swallowed, as wait_for does when the awaited call is already done


async def test_the_forwarder_honours_a_cancellation_swallowed_by_its_producer_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import aiokafka

    monkeypatch.setattr(aiokafka, "AIOKafkaProducer", _Producer)
    monkeypatch.setattr(app.kafka.inspect, "start_or_close", _start_while_cancelled)
    ran: list[bool] = []
    monkeypatch.setattr(label_outbox.LabelForwarder, "run", lambda self: ran.append(True))
    _Producer.stopped = 0
    task = asyncio.create_task(label_outbox.forward_to_kafka(load_settings({}), object()))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5.0)
    assert task.cancelled()
    assert ran == []  # it never went on to forward
    assert _Producer.stopped == 1
