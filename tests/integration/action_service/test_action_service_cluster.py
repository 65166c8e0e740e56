"""The action service on a real Redis Cluster (3 masters, 1 replica each, ports 17000-17011):
the HTTP contract, the merged ledger, WAIT's 503 and a master killed mid-stream."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from app.action_service.app import create_app
from app.action_service.ledger import read_effects_async
from app.action_service.redis_keys import LABEL_STREAMS, SHARD_KEYS, shard_of
from app.actions import Action, make_action
from app.harness.pipeline import effects
from app.harness.redisdb import flush_db, with_db
from app.redis_url import node_url
from app.settings import Settings, load_settings
from app.stack.redis_cluster import RedisCluster

pytestmark = pytest.mark.integration

TOKEN = "cluster-test-token"
BASE_PORT = 17000
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.fixture(scope="session")
def cluster() -> Iterator[RedisCluster]:
    """A fresh 3+3 Redis Cluster of our own, stopped (by its pids) and removed afterwards."""
    state = Path(f"/tmp/rc-itest-{os.getpid()}")
    shutil.rmtree(state, ignore_errors=True)
    nodes = RedisCluster(load_settings({}), base_port=BASE_PORT, state_dir=state,
                         node_timeout_ms=1000)
    try:
        nodes.start(timeout_s=60)
        yield nodes
    finally:
        nodes.stop()
        shutil.rmtree(state, ignore_errors=True)


def _settings(cluster: RedisCluster, **overrides: object) -> Settings:
    values: dict[str, object] = {"redis_url": cluster.seed_url, "action_token": TOKEN,
                                 "redis_wait_timeout_ms": 300, "labels_forward": False}
    values.update(overrides)
    return load_settings({}, **values)


@pytest.fixture
async def client(cluster: RedisCluster) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(create_app(_settings(cluster)))) as test_client:
        yield test_client


@pytest.fixture
async def redis(cluster: RedisCluster) -> AsyncIterator[AsyncRedisCluster]:
    client = AsyncRedisCluster.from_url(node_url(cluster.seed_url), decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


def _action(tag: str, card: str, action_type: str = "freeze_card", n: int = 0) -> Action:
    now = time.time_ns() // 1_000_000
    return make_action(action_type, card_id=card, txn_id=f"{tag}-{card}-{n}", ts_ms=now - 1000,  # type: ignore[arg-type]
                       score=0.9, model_version="m-1", decided_at_ms=now)


async def _post(client: TestClient, action: Action) -> tuple[int, dict[str, object]]:
    response = await client.post("/v1/actions", data=action.to_json(),
                                 headers={**HEADERS, "Idempotency-Key": action.idempotency_key})
    return response.status, await response.json()


async def _answered(send: Callable[[], Awaitable[tuple[int, dict[str, object]]]],
                    timeout_s: float = 30.0) -> tuple[int, dict[str, object], int]:
    """Send until the answer is not a 503 (a client retries a WAIT timeout; on this shared
    machine a replica can lag past the timeout); (status, body, 503s seen first)."""
    deadline = time.monotonic() + timeout_s
    retried = 0
    while True:
        status, body = await send()
        if status != 503 or time.monotonic() > deadline:
            return status, body, retried
        retried += 1
        await asyncio.sleep(0.1)  # a client's retry interval, deadline-bounded (poll)


async def _post_answered(client: TestClient, action: Action, timeout_s: float = 30.0
                         ) -> tuple[int, dict[str, object], int]:
    return await _answered(lambda: _post(client, action), timeout_s)


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no {what} within {timeout_s} s")


async def test_contract_on_the_cluster(client: TestClient, cluster: RedisCluster) -> None:
    first = _action("contract", "cl-card-1")
    status, body, retried = await _post_answered(client, first)
    assert (status == 201 or (retried and status == 200)) and body["outcome"] == "frozen"
    status, again, _ = await _post_answered(client, first)
    assert (status, again) == (200, body)
    # the same key with another card: its record would live in another shard, still a 422
    other = make_action("freeze_card", card_id="cl-card-2", txn_id=first.txn_id, ts_ms=first.ts_ms,
                        score=0.9, model_version="m-1", decided_at_ms=first.decided_at_ms)
    assert shard_of(other.card_id) != shard_of(first.card_id)
    status, _ = await _post(client, other)
    assert status == 422
    got = await client.get(f"/v1/actions/{first.idempotency_key}", headers=HEADERS)
    assert got.status == 200 and (await got.json())["result"] == body
    unknown = await client.get(f"/v1/actions/{'0' * 32}", headers=HEADERS)
    assert unknown.status == 404
    card = await (await client.get("/v1/cards/cl-card-1", headers=HEADERS)).json()
    assert card["status"] == "frozen" and card["txn_id"] == first.txn_id
    assert (await (await client.get("/v1/cards/cl-card-2", headers=HEADERS)).json())[
        "status"] == "active"
    assert (await client.get("/readyz", headers=HEADERS)).status == 200


async def _decide_answered(client: TestClient, card: str, route: str,
                           key: str) -> tuple[int, dict[str, object]]:
    """POST an analyst decision until the answer is not a 503 (see `_answered`)."""

    async def decide() -> tuple[int, dict[str, object]]:
        response = await client.post(f"/v1/cards/{card}/{route}", data=b'{"reason": "r"}',
                                     headers={**HEADERS, "Idempotency-Key": key})
        return response.status, await response.json()

    status, body, _ = await _answered(decide)
    return status, body


async def test_analyst_decisions_on_the_cluster(client: TestClient, redis: AsyncRedisCluster,
                                                cluster: RedisCluster) -> None:
    """Release and confirm run in the card's slot (one script call) like actions."""
    for card in ("cl-dec-1", "cl-dec-2", "cl-dec-3"):  # several shards, so several masters
        freeze = _action("decide", card)
        assert (await _post_answered(client, freeze))[0] in (200, 201)
        status, released = await _decide_answered(client, card, "release", f"rel-{card}")
        assert status in (200, 201) and released["outcome"] == "released"
        assert (await _decide_answered(client, card, "release", f"rel-{card}")) == (200, released)
        assert (await _post_answered(client, freeze))[:2] == (200, (await _post(client, freeze))[1])
        body = await (await client.get(f"/v1/cards/{card}", headers=HEADERS)).json()
        assert body["status"] == "active"
        assert [e["event"] for e in body["history"]] == ["frozen", "released"]
        status, confirmed = await _decide_answered(client, card, "confirm", f"conf-{card}")
        assert status in (200, 201) and confirmed["txn_id"] == freeze.txn_id
        labels = await redis.xrange(LABEL_STREAMS[shard_of(card)])
        assert [(f["txn_id"], f["label"]) for _, f in labels if f["card_id"] == card] == [
            (freeze.txn_id, "0"), (freeze.txn_id, "1")]


async def test_merged_ledger_holds_every_key_once(client: TestClient, redis: AsyncRedisCluster,
                                                  cluster: RedisCluster) -> None:
    actions = [_action("ledger", f"lg-{i % 37}", "alert_customer" if i % 2 else "freeze_card", i)
               for i in range(200)]
    answers = await asyncio.gather(*(_post_answered(client, a) for a in actions))
    # 201 at once; after a 503 (WAIT timed out, the effect already written) the retry may be
    # answered from the record (200 replayed)
    assert all(status == 201 or (retried and status == 200) for status, _, retried in answers)
    again = await asyncio.gather(*(_post_answered(client, a) for a in actions[:50]))
    assert {status for status, _, _ in again} == {200}
    ledger = await read_effects_async(redis)
    mine = Counter(f["idempotency_key"] for _, f in ledger if f["txn_id"].startswith("ledger-"))
    assert set(mine) == {a.idempotency_key for a in actions} and set(mine.values()) == {1}
    ids = [entry_id for entry_id, _ in ledger]
    order = [tuple(int(p) for p in i.split("-")) for i in ids]
    assert order == sorted(order)  # merged by entry id across the shards
    # the shards really spread over the three masters
    masters = {cluster.master_for_key(SHARD_KEYS[shard_of(a.card_id)][0]).port for a in actions}
    assert len(masters) == 3


def test_test_support_reads_and_flushes_the_cluster(cluster: RedisCluster) -> None:
    """The fault suite's helpers take a cluster URL: the merged ledger, then a flush of every
    master."""
    import redis

    ledger = effects(cluster.seed_url)
    assert len(ledger) >= 200 and all("idempotency_key" in e for e in ledger)
    assert with_db(cluster.seed_url, 3) == cluster.seed_url
    flush_db(cluster.seed_url)
    for node in cluster.node_list():
        if node.role == "master":
            with redis.Redis(port=node.port) as client:
                assert client.dbsize() == 0
    assert effects(cluster.seed_url) == []


def _card_on_another_master(cluster: RedisCluster, tag: str) -> tuple[Action, int]:
    """An action whose card shard and key shard live on different masters, and the port of
    its card shard's master."""
    for i in range(200):
        action = _action(tag, f"wait-{i}")
        card_master = cluster.master_for_key(SHARD_KEYS[shard_of(action.card_id)][0])
        key_master = cluster.master_for_key(SHARD_KEYS[shard_of(action.idempotency_key)][0])
        if card_master.port != key_master.port:
            return action, card_master.port
    raise AssertionError("no such card")


async def test_wait_without_replica_answers_503_then_the_retry_replays(
    client: TestClient, cluster: RedisCluster
) -> None:
    action, master_port = _card_on_another_master(cluster, "wait")
    master = next(n for n in cluster.node_list() if n.port == master_port)
    (replica,) = cluster.replicas_of(master)
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)  # our replica process: it stops acknowledging
    try:
        status, body = await _post(client, action)
        assert status == 503, body
        assert "0 of 1 required Redis replicas" in str(body["error"])
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    cluster.wait_ok(30)
    status, replayed = await _post(client, action)
    assert status == 200, replayed  # applied by the first call, answered from its record
    got = await client.get(f"/v1/actions/{action.idempotency_key}", headers=HEADERS)
    assert (await got.json())["result"] == replayed


async def test_master_killed_mid_stream_loses_no_acknowledged_effect(
    cluster: RedisCluster,
) -> None:
    """SIGKILL the master owning the most shards while clients post; its replica is
    promoted, the old master comes back as a replica. Every key answered 201 is in the merged
    ledger exactly once; every key is answered 200/201 in the end (clients retry 503s)."""
    actions = [_action("kill", f"kc-{i % 61}", "alert_customer" if i % 3 else "freeze_card", i)
               for i in range(600)]
    owners = Counter(cluster.master_for_key(keys[0]).port for keys in SHARD_KEYS)
    victim_port = owners.most_common(1)[0][0]
    victim = cluster.node(victim_port)
    answers: dict[str, list[int]] = defaultdict(list)
    queue = list(reversed(actions))
    done: set[str] = set()
    killed_at: list[int] = []
    deadline = time.monotonic() + 40

    async with TestClient(TestServer(create_app(_settings(cluster)))) as client:
        async def worker() -> None:
            while len(done) < len(actions) and time.monotonic() < deadline:
                if not queue:
                    await asyncio.sleep(0.02)  # others hold the last keys; they may come back
                    continue
                action = queue.pop()
                status, _ = await _post(client, action)
                answers[action.idempotency_key].append(status)
                if status == 503:
                    queue.insert(0, action)
                    await asyncio.sleep(0.05)  # back off a little, as the dispatcher does
                else:
                    done.add(action.idempotency_key)

        async def answered() -> bool:
            return len(done) >= 150

        async def chaos() -> None:
            await _until(answered, 30, "150 answers")
            pid = victim.process.pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed_at.append(len(done))
            await asyncio.to_thread(cluster.wait_ok, 30, exclude=[victim_port])
            # its replica was promoted: three masters serve every slot again, none is the victim
            assert victim_port not in {n.port for n in cluster.node_list() if n.role == "master"}
            await asyncio.to_thread(victim.start)  # rejoins as the new master's replica
            await asyncio.to_thread(cluster.wait_ok, 30)

        results = await asyncio.gather(chaos(), *(worker() for _ in range(12)),
                                       return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    assert len(done) == len(actions), f"only {len(done)} of {len(actions)} answered in time"
    statuses = Counter(s for per in answers.values() for s in per)
    print(f"answers {dict(statuses)}")
    assert set(statuses) <= {200, 201, 503}, statuses
    assert killed_at and killed_at[0] < len(actions) and statuses[503] > 0  # mid-stream
    created = {key for key, per in answers.items() if 201 in per}
    for key, per in answers.items():
        assert per.count(201) <= 1, (key, per)
        assert per[-1] in (200, 201), (key, per)
    fresh = AsyncRedisCluster.from_url(node_url(cluster.seed_url), decode_responses=True)
    try:
        ledger = await read_effects_async(fresh)
    finally:
        await fresh.aclose()
    per_key = Counter(f["idempotency_key"] for _, f in ledger if f["txn_id"].startswith("kill-"))
    assert created <= set(per_key)  # nothing acknowledged was lost with the master
    assert set(per_key) == {a.idempotency_key for a in actions}
    assert set(per_key.values()) == {1}  # nothing doubled
