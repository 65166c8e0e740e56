"""The delivery client against a scripted fake session: retries, verdicts, bound, order."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import orjson
import pytest
from prometheus_client import REGISTRY

from app.actions import make_action
from app.actions.delivery import ActionDeliverer, Delivered, Rejected
from app.settings import load_settings

TS = 1_718_000_000_000


def _action(txn_id: str = "txn-1", action_type: str = "freeze_card"):
    return make_action(
        action_type,
        card_id="card-1",
        txn_id=txn_id,
        ts_ms=TS,
        score=0.9,
        model_version="m",
        decided_at_ms=TS,
    )


@dataclass
class _Reply:
    status: int
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)


class _Response:
    def __init__(self, reply: _Reply) -> None:
        self.status = reply.status
        self.headers = reply.headers
        self._body = reply.body

    async def read(self) -> bytes:
        return self._body

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Post:
    def __init__(
        self, session: FakeSession, url: str, data: bytes, headers: dict[str, str]
    ) -> None:
        self._session, self._url, self._data, self._headers = session, url, data, headers

    async def __aenter__(self) -> _Response:
        s = self._session
        s.calls.append((self._url, self._data, dict(self._headers)))
        s.in_flight += 1
        s.max_in_flight = max(s.max_in_flight, s.in_flight)
        try:
            await asyncio.sleep(s.latency_s)
            outcome = s.answer(self._data)
        finally:
            s.in_flight -= 1
        if isinstance(outcome, BaseException):
            raise outcome
        return _Response(outcome)

    async def __aexit__(self, *exc: object) -> None:
        return None


class FakeSession:
    """Answers POSTs from a script of replies/exceptions (no network)."""

    def __init__(
        self, script: list[_Reply | BaseException] | None = None, latency_s: float = 0.0
    ) -> None:
        self.script: Iterator[_Reply | BaseException] | None = (
            iter(script) if script is not None else None
        )
        self.latency_s = latency_s
        self.calls: list[tuple[str, bytes, dict[str, str]]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.closed = False

    def answer(self, data: bytes) -> _Reply | BaseException:
        return next(self.script) if self.script is not None else _Reply(201)

    def post(self, url: str, *, data: bytes, headers: dict[str, str], timeout: object) -> _Post:
        return _Post(self, url, data, headers)

    async def close(self) -> None:
        self.closed = True


class SleepRecorder:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


SETTINGS = load_settings(
    {},
    action_service_url="http://svc.test:9/",
    action_token="s3cret",
    dispatch_concurrency=3,
    dispatch_backoff_base_s=0.05,
    dispatch_backoff_cap_s=5.0,
)


def _deliverer(session: FakeSession, sleep: SleepRecorder | None = None) -> ActionDeliverer:
    return ActionDeliverer(
        SETTINGS,
        session_factory=lambda: session,
        sleep=sleep or SleepRecorder(),
        rng=random.Random(5),
    )


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_201_is_delivered_with_key_token_and_canonical_body():
    session = FakeSession([_Reply(201)])
    action = _action()
    async with _deliverer(session) as deliverer:
        result = await deliverer.deliver(action)
    assert result == Delivered(status=201, replayed=False, attempts=1)
    url, body, headers = session.calls[0]
    assert url == "http://svc.test:9/v1/actions"
    assert body == action.to_json()
    assert headers["Idempotency-Key"] == action.idempotency_key
    assert headers["Authorization"] == "Bearer s3cret"
    assert session.closed


async def test_200_replay_is_delivered_and_marked_replayed():
    session = FakeSession([_Reply(200, headers={"Idempotent-Replayed": "true"})])
    before = _sample("fraudstream_dispatch_replayed_total", {"type": "freeze_card"})
    async with _deliverer(session) as deliverer:
        result = await deliverer.deliver(_action())
    assert result == Delivered(status=200, replayed=True, attempts=1)
    assert _sample("fraudstream_dispatch_replayed_total", {"type": "freeze_card"}) == before + 1


async def test_transient_failures_are_retried_with_growing_jittered_waits():
    script: list[_Reply | BaseException] = [
        aiohttp.ClientConnectionError("refused"),
        TimeoutError(),
        _Reply(409),
        _Reply(500),
        _Reply(503, headers={"Retry-After": "1"}),
        _Reply(502),
        _Reply(201),
    ]
    session, sleep = FakeSession(script), SleepRecorder()
    before = _sample("fraudstream_dispatch_retries_total", {"reason": "connection"})
    async with _deliverer(session, sleep) as deliverer:
        result = await deliverer.deliver(_action())
    assert result == Delivered(status=201, replayed=False, attempts=7)
    assert len(sleep.waits) == 6
    ceilings = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6]
    jittered = sleep.waits[:4] + sleep.waits[5:]
    assert all(0 <= w <= c for w, c in zip(jittered, ceilings[:4] + ceilings[5:], strict=True))
    assert sleep.waits[4] == 1.0  # the 503's Retry-After: 1 beat the jitter (<= 0.8)
    assert len({c[1] for c in session.calls}) == 1  # the same body every time
    assert _sample("fraudstream_dispatch_retries_total", {"reason": "connection"}) == before + 1


async def test_retries_never_give_up_on_their_own():
    session = FakeSession([_Reply(503)] * 200 + [_Reply(201)])
    sleep = SleepRecorder()
    async with _deliverer(session, sleep) as deliverer:
        result = await deliverer.deliver(_action())
    assert result.attempts == 201
    assert max(sleep.waits) <= 5.0


@pytest.mark.parametrize("status", [400, 401, 410, 413, 422])
async def test_permanent_4xx_is_rejected_without_retry(status):
    body = orjson.dumps({"error": "nope", "field": "decided_at_ms"})
    session, sleep = FakeSession([_Reply(status, body=body)]), SleepRecorder()
    before = _sample("fraudstream_dispatch_rejected_total", {"status": str(status)})
    async with _deliverer(session, sleep) as deliverer:
        result = await deliverer.deliver(_action())
    assert result == Rejected(status=status, body=body.decode(), attempts=1)
    assert sleep.waits == []
    assert _sample("fraudstream_dispatch_rejected_total", {"status": str(status)}) == before + 1


async def test_deliver_many_keeps_input_order_and_the_concurrency_bound():
    session = FakeSession(latency_s=0.01)
    actions = [_action(f"txn-{i}") for i in range(12)]
    async with _deliverer(session) as deliverer:
        results = await deliverer.deliver_many(actions)
    assert len(results) == 12
    assert all(isinstance(r, Delivered) for r in results)
    assert session.max_in_flight == SETTINGS.dispatch_concurrency
    assert sorted(c[2]["Idempotency-Key"] for c in session.calls) == sorted(
        a.idempotency_key for a in actions
    )


async def test_deliver_many_results_align_with_inputs():
    class ByKey(FakeSession):
        def answer(self, data: bytes) -> _Reply:
            return _Reply(422 if orjson.loads(data)["txn_id"].endswith("bad") else 201)

    actions = [_action("txn-ok1"), _action("txn-bad"), _action("txn-ok2")]
    async with _deliverer(ByKey()) as deliverer:
        results = await deliverer.deliver_many(actions)
    assert [type(r) for r in results] == [Delivered, Rejected, Delivered]


async def test_use_outside_context_is_an_error():
    with pytest.raises(RuntimeError):
        await _deliverer(FakeSession()).deliver(_action())


async def test_cancellation_stops_a_retrying_delivery():
    session = FakeSession([_Reply(503)] * 10_000)
    retried_five_times = asyncio.Event()

    async def counting_sleep(seconds: float) -> None:
        if len(session.calls) >= 5:
            retried_five_times.set()
        await asyncio.sleep(0)

    deliverer = ActionDeliverer(
        SETTINGS, session_factory=lambda: session, sleep=counting_sleep, rng=random.Random(1)
    )
    async with deliverer:
        task = asyncio.create_task(deliverer.deliver(_action()))
        await asyncio.wait_for(retried_five_times.wait(), timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert 5 <= len(session.calls) < 10_000
