"""The apply script's call/reply codec and the batcher's scheduling, with a fake connection."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

import hiredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from app.action_service.apply_script import (
    ApplyResult,
    NotReplicatedError,
    ScriptActionError,
    ScriptLimits,
    apply_script_sha,
    pack_call,
    parse_reply,
)
from app.action_service.batcher import ApplyBatcher
from app.action_service.redis_keys import action_keys, claim_key
from app.actions import Action, make_action

LIMITS = ScriptLimits(ttl_ms=86_400_000, max_age_ms=82_800_000, margin_ms=3_600_000,
                      alerts_per_card=100)


def _action(i: int, card: str = "card-1") -> Action:
    return make_action("freeze_card" if i % 2 else "alert_customer", card_id=card,
                       txn_id=f"txn-{i}", ts_ms=1_718_000_000_000, score=0.9,
                       model_version="m-1", decided_at_ms=1_718_000_000_000)


def _unpack(packed: bytes) -> list[str]:
    reader = hiredis.Reader(encoding="utf-8")
    reader.feed(packed)
    return reader.gets()  # a command is a RESP array of bulk strings


def test_pack_call_lays_out_seven_keys_per_action_then_args():
    a, b = _action(1, "c-a"), _action(2, "c-b")
    cmd = _unpack(pack_call([a, b], LIMITS))
    assert cmd[:3] == ["EVALSHA", apply_script_sha(), "16"]
    keys, args = cmd[3:19], cmd[19:]
    assert keys == [*action_keys(a.idempotency_key, "c-a"), claim_key(a.idempotency_key),
                    *action_keys(b.idempotency_key, "c-b"), claim_key(b.idempotency_key)]
    assert args[:5] == ["86400000", "82800000", "3600000", "100", "90000000"]
    assert len(args) == 5 + 2 * 13
    assert args[5] == a.idempotency_key and args[18] == b.idempotency_key
    assert args[7:11] == ["freeze_card", "c-a", "txn-1", "1718000000000"]
    assert args[14] == "freeze_card by model m-1 (score 0.9)"
    assert args[15] == ""  # no explanation
    assert args[16:18] == ["model", ""]  # decided by the model, no list rule


def test_parse_reply_gives_one_result_per_action():
    reply = ["1718000000042",
             "created", "frozen", "1718000000042", "1718000000042-0",
             "replay", "alert_queued", "1717000000000", "1717000000000-3",
             "gone", "", "", "",
             "error", "WRONGTYPE effects is a string, expected stream", "", ""]
    created, replay, gone, error = parse_reply(reply, 4)
    assert created == ApplyResult("created", 1718000000042, "frozen", 1718000000042,
                                  "1718000000042-0")
    assert replay == ApplyResult("replay", 1718000000042, "alert_queued", 1717000000000,
                                 "1717000000000-3")
    assert gone == ApplyResult("gone", 1718000000042)
    assert isinstance(error, ScriptActionError) and "WRONGTYPE" in str(error)
    with pytest.raises(RuntimeError):
        parse_reply(reply, 3)
    with pytest.raises(RuntimeError):
        parse_reply(["1", "maybe", "", "", ""], 1)


class FakeConnection:
    """Answers each command, in order, when the test releases an outcome; records what was
    sent. Opened on first use, like the real one."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.gate: asyncio.Queue[object] = asyncio.Queue()
        self.opened = 0
        self.disconnected = False
        self._waiting: collections.deque[tuple[list[str], Callable[[Any], None]]] = (
            collections.deque())
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None

    def is_open(self) -> bool:
        return self._pump is not None and not self.disconnected

    async def open(self) -> None:
        self.opened += 1
        self._pump = asyncio.get_running_loop().create_task(self._answer())

    def send(self, command: bytes, on_reply: Callable[[Any], None]) -> None:
        assert self.is_open()
        self.sent.append(_unpack(command))
        self._waiting.append((self.sent[-1], on_reply))
        self._wake.set()

    async def _answer(self) -> None:
        while True:
            outcome = await self.gate.get()
            while not self._waiting:
                self._wake.clear()
                await self._wake.wait()
            cmd, on_reply = self._waiting.popleft()
            if outcome == "auto" and cmd[0] == "WAIT":
                outcome = int(cmd[1])  # every replica asked for acknowledges
            if outcome == "auto":
                count = int(cmd[2]) // 7
                reply = ["1718000000042"]
                for i in range(count):
                    reply += ["created", "frozen", "1718000000042", f"1718000000042-{i}"]
                outcome = reply
            on_reply(outcome)

    async def disconnect(self, nowait: bool = False) -> None:
        self.disconnected = True
        if self._pump is not None:
            self._pump.cancel()


def _batch_sizes(conn: FakeConnection) -> list[int]:
    return [int(c[2]) // 7 for c in conn.sent if c[0] == "EVALSHA"]


def _batcher(**options: Any) -> tuple[FakeConnection, ApplyBatcher]:
    """A fake connection and a batcher whose every lane is that connection: one lane, batches
    of up to 10, unless `options` say otherwise."""
    conn = FakeConnection()
    return conn, ApplyBatcher(lambda: conn, LIMITS, **{"lanes": 1, "max_batch": 10, **options})


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)  # let the batcher's tasks run


async def test_first_action_goes_alone_and_the_rest_wait_for_the_next_batch():
    conn = FakeConnection()
    seen: list[tuple[int, float]] = []

    class Observer:
        def batch_done(self, size: int, seconds: float) -> None:
            seen.append((size, seconds))

    batcher = ApplyBatcher(lambda: conn, LIMITS, lanes=1, max_batch=3, observer=Observer())
    settled: list[int] = []
    first = batcher.submit(_action(0), lambda: settled.append(0))
    await _settle()
    rest = [batcher.submit(_action(i), lambda i=i: settled.append(i)) for i in range(1, 6)]
    await _settle()
    assert _batch_sizes(conn) == [1]  # at low load a batch is one request
    for _ in range(3):
        conn.gate.put_nowait("auto")
        await _settle()
    assert _batch_sizes(conn) == [1, 3, 2]  # capped at max_batch, then the remainder
    results = [await first] + [await f for f in rest]
    assert [r.verdict for r in results] == ["created"] * 6
    assert sorted(settled) == list(range(6))
    assert [size for size, _ in seen] == [1, 3, 2]
    await batcher.close()
    assert conn.disconnected


async def test_a_failed_call_fails_every_action_of_its_batch_only():
    conn, batcher = _batcher()
    lone = batcher.submit(_action(0))
    await _settle()
    batch = [batcher.submit(_action(i)) for i in range(1, 4)]
    await _settle()
    conn.gate.put_nowait(RedisConnectionError("lost"))
    await _settle()
    with pytest.raises(RedisConnectionError):
        await lone
    conn.gate.put_nowait("auto")
    assert [(await f).verdict for f in batch] == ["created"] * 3
    await batcher.close()


async def test_noscript_loads_the_script_and_resends_once():
    conn, batcher = _batcher()
    pending = batcher.submit(_action(0))
    await _settle()
    conn.gate.put_nowait(NoScriptError("NOSCRIPT No matching script."))
    conn.gate.put_nowait(apply_script_sha())
    conn.gate.put_nowait("auto")
    assert (await pending).verdict == "created"
    assert [c[0] for c in conn.sent] == ["EVALSHA", "SCRIPT", "EVALSHA"]
    assert conn.sent[0] == conn.sent[2]
    await batcher.close()


async def test_wait_follows_the_script_on_its_connection_and_gates_the_answers():
    conn, batcher = _batcher(wait_replicas=1, wait_timeout_ms=250)
    acked = batcher.submit(_action(0))
    await _settle()
    conn.gate.put_nowait("auto")
    conn.gate.put_nowait("auto")  # WAIT answers 1
    assert (await acked).verdict == "created"
    assert [c[0] for c in conn.sent] == ["EVALSHA", "WAIT"]
    assert conn.sent[1] == ["WAIT", "1", "250"]
    refused = [batcher.submit(_action(i)) for i in (1, 2)]
    await _settle()
    conn.gate.put_nowait(["1718000000042", "created", "frozen", "1718000000042", "1-0",
                          "mismatch", "", "", ""])
    conn.gate.put_nowait(0)  # no replica acknowledged within the timeout
    with pytest.raises(NotReplicatedError, match="0 of 1"):
        await refused[0]
    assert (await refused[1]).verdict == "mismatch"  # nothing was written for it
    await batcher.close()


async def test_noscript_with_wait_skips_the_first_wait_reply():
    conn, batcher = _batcher(wait_replicas=1, wait_timeout_ms=100)
    pending = batcher.submit(_action(0))
    await _settle()
    conn.gate.put_nowait(NoScriptError("NOSCRIPT No matching script."))
    conn.gate.put_nowait(1)  # the first WAIT: covers nothing, must not resolve the batch
    conn.gate.put_nowait(apply_script_sha())
    conn.gate.put_nowait("auto")
    conn.gate.put_nowait(0)
    with pytest.raises(NotReplicatedError):
        await pending
    assert [c[0] for c in conn.sent] == ["EVALSHA", "WAIT", "SCRIPT", "EVALSHA", "WAIT"]
    await batcher.close()


async def test_two_lanes_keep_two_batches_in_flight():
    conns: list[FakeConnection] = []

    def connect() -> FakeConnection:
        conns.append(FakeConnection())
        return conns[-1]

    batcher = ApplyBatcher(connect, LIMITS, lanes=2, max_batch=10)
    futures = [batcher.submit(_action(0))]
    await _settle()
    futures.append(batcher.submit(_action(1)))
    await _settle()
    futures += [batcher.submit(_action(i)) for i in range(2, 5)]
    await _settle()
    assert [_batch_sizes(c) for c in conns] == [[1], [1]]
    for conn in conns:
        conn.gate.put_nowait("auto")
        conn.gate.put_nowait("auto")
    assert [(await f).verdict for f in futures] == ["created"] * 5
    assert sorted(sum((_batch_sizes(c) for c in conns), [])) == [1, 1, 3]
    await batcher.close()


def test_batcher_guards():
    with pytest.raises(ValueError):
        ApplyBatcher(FakeConnection, LIMITS, lanes=0, max_batch=1)
    with pytest.raises(ValueError):
        ApplyBatcher(FakeConnection, LIMITS, lanes=1, max_batch=0)


async def test_actions_submitted_in_one_loop_pass_share_one_call():
    conn, batcher = _batcher(lanes=2)
    futures = [batcher.submit(_action(i)) for i in range(4)]
    await _settle()
    assert _batch_sizes(conn) == [4]  # one dispatch at the end of the pass, not one per submit
    conn.gate.put_nowait("auto")
    assert [(await f).verdict for f in futures] == ["created"] * 4
    await batcher.close()


async def test_a_failed_script_load_fails_the_batch_with_its_own_error():
    conn, batcher = _batcher()
    pending = batcher.submit(_action(0))
    await _settle()
    conn.gate.put_nowait(NoScriptError("NOSCRIPT No matching script."))
    conn.gate.put_nowait(RedisConnectionError("OOM while loading"))
    conn.gate.put_nowait(NoScriptError("NOSCRIPT No matching script."))
    with pytest.raises(RedisConnectionError, match="OOM"):
        await pending
    assert [c[0] for c in conn.sent] == ["EVALSHA", "SCRIPT", "EVALSHA"]
    await batcher.close()


async def test_a_failed_open_fails_its_batch_and_the_next_batch_opens_again():
    class Refusing(FakeConnection):
        tries = 0

        async def open(self) -> None:
            self.tries += 1
            if self.tries == 1:
                raise RedisConnectionError("refused")
            await super().open()

    conn = Refusing()
    settled: list[int] = []
    batcher = ApplyBatcher(lambda: conn, LIMITS, lanes=1, max_batch=10)
    first = batcher.submit(_action(0), lambda: settled.append(0))
    with pytest.raises(RedisConnectionError, match="refused"):
        await first
    assert settled == [0]
    second = batcher.submit(_action(1))
    conn.gate.put_nowait("auto")
    assert (await second).verdict == "created"
    assert (conn.tries, conn.opened) == (2, 1)
    await batcher.close()


async def test_close_waits_for_the_batch_in_flight_and_fails_what_is_queued():
    conn, batcher = _batcher(max_batch=1)
    in_flight = batcher.submit(_action(0))
    await _settle()
    queued = batcher.submit(_action(1))
    closing = asyncio.ensure_future(batcher.close())
    await _settle()
    assert not closing.done()  # Redis has not answered the batch in flight
    conn.gate.put_nowait("auto")
    await closing
    assert (await in_flight).verdict == "created"
    with pytest.raises(RedisConnectionError, match="shutting down"):
        await queued
    assert _batch_sizes(conn) == [1] and conn.disconnected
    with pytest.raises(RuntimeError):
        batcher.submit(_action(2))
