"""Redis SIGKILLed and restarted (same AOF, appendfsync always) under load on the batcher.

Every key answered 201 is in Redis and in `effects` exactly once; requests during the outage
got 503 and nothing else from the 5xx range; retries of keys applied before the kill see 200.
The test owns its redis-server (temporary directory, free port) and kills it by its PID.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from app.action_service.ledger import count_effects_async, read_effects_async
from app.action_service.redis_keys import idem_key
from app.actions import Action, make_action
from app.settings import load_settings, settings_environ
from app.stack.redis import RedisNode
from tests.integration.action_service.conftest import REPO_ROOT, TOKEN, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ACTIONS = 3000
CONCURRENCY = 32
KILL_AT = 600  # effects applied before Redis is SIGKILLed
OUTAGE_503S = 50  # 503 answers seen before Redis is started again


async def _until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.02)  # poll with a deadline


async def test_redis_sigkill_under_load_loses_and_repeats_nothing(tmp_path: Path) -> None:
    node = RedisNode(
        load_settings({}, state_dir=tmp_path, redis_port=free_port(), redis_appendfsync="always")
    )
    node.start()
    node.wait_ready()
    url = node.settings.local_redis_url
    port = free_port()
    settings = load_settings({}, redis_url=url, action_token=TOKEN, action_redis_timeout_s=0.5)
    env = {**settings_environ(settings), "PYTHONPATH": str(REPO_ROOT)}
    service = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "app.cli.main", "action-service", "--port", str(port)],
        cwd=REPO_ROOT, env=env,
    )
    redis = Redis.from_url(url, decode_responses=True)
    now = time.time_ns() // 1_000_000
    actions = [
        make_action("freeze_card" if i % 3 == 0 else "alert_customer", card_id=f"kc{i % 113}",
                    txn_id=f"kill-{i}", ts_ms=now, score=0.97, model_version="m1",
                    decided_at_ms=now)
        for i in range(ACTIONS)
    ]
    answers: dict[str, list[int]] = defaultdict(list)
    queue: list[Action] = list(reversed(actions))
    done: set[str] = set()
    kill_pid: list[int] = []
    try:
        async def ready() -> bool:
            try:
                async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/readyz") as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await _until(ready, 30, "the action service")
        deadline = time.monotonic() + 120

        async def worker(session: aiohttp.ClientSession) -> None:
            while len(done) < ACTIONS and time.monotonic() < deadline:
                if not queue:
                    await asyncio.sleep(0.01)  # others hold the last keys; they may come back
                    continue
                action = queue.pop()
                headers = {"Authorization": f"Bearer {TOKEN}",
                           "Idempotency-Key": action.idempotency_key,
                           "Content-Type": "application/json"}
                async with session.post(f"http://127.0.0.1:{port}/v1/actions",
                                        data=action.to_json(), headers=headers) as response:
                    await response.read()
                    answers[action.idempotency_key].append(response.status)
                    if response.status == 503:
                        queue.insert(0, action)  # retried later, with the same key
                    else:
                        done.add(action.idempotency_key)

        async def chaos() -> None:
            async def applied() -> bool:
                return await count_effects_async(redis) >= KILL_AT

            await _until(applied, 60, f"{KILL_AT} effects")
            pid = node.process.pid()
            assert pid is not None
            kill_pid.append(pid)
            os.kill(pid, signal.SIGKILL)

            async def outage_seen() -> bool:
                return sum(s.count(503) for s in list(answers.values())) >= OUTAGE_503S

            await _until(outage_seen, 30, f"{OUTAGE_503S} answers 503 during the outage")
            await asyncio.to_thread(node.start)
            await asyncio.to_thread(node.wait_ready)

        connector = aiohttp.TCPConnector(limit=CONCURRENCY)
        async with aiohttp.ClientSession(connector=connector) as session:
            results = await asyncio.gather(
                chaos(), *(worker(session) for _ in range(CONCURRENCY)), return_exceptions=True
            )
        for result in results:
            if isinstance(result, BaseException):
                raise result

        assert kill_pid and node.process.pid() not in (None, kill_pid[0])
        await redis.aclose()  # its connection died with the kill
        redis = Redis.from_url(url, decode_responses=True)
        assert len(done) == ACTIONS, f"only {len(done)} of {ACTIONS} keys answered in time"
        statuses = Counter(s for per_key in answers.values() for s in per_key)
        lost_answers = sum(1 for per in answers.values() if 201 not in per)
        print(f"answers {dict(statuses)}; keys applied while their answer was lost: {lost_answers}")
        assert set(statuses) <= {200, 201, 503}, statuses
        assert statuses[503] >= OUTAGE_503S
        entries = await read_effects_async(redis)
        per_key = Counter(fields["idempotency_key"] for _, fields in entries)
        created = {key for key, per in answers.items() if 201 in per}
        for key, per in answers.items():
            assert per.count(201) <= 1, (key, per)  # never applied twice
            assert per[-1] in (200, 201), (key, per)
        # every key answered 201 survived the kill: in Redis and in the ledger exactly once
        assert created <= set(per_key)
        assert set(per_key.values()) == {1}
        assert set(per_key) == {a.idempotency_key for a in actions}
        card_of = {a.idempotency_key: a.card_id for a in actions}
        pipe = redis.pipeline(transaction=False)
        for key in created:
            pipe.exists(idem_key(key, card_of[key]))
        assert all(await pipe.execute())
        # a key applied by a batch whose answer was lost is answered 200 on its retry
        assert statuses[201] + lost_answers == ACTIONS
    finally:
        try:
            service.terminate()
            try:
                service.wait(timeout=20)
            except subprocess.TimeoutExpired:
                service.kill()  # never left running: the failure is raised below
                service.wait(timeout=20)
                raise AssertionError("the action service did not stop within 20 s of SIGTERM"
                                     ) from None
        finally:
            await redis.aclose()
            node.stop()
