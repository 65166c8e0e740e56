"""The apply batcher for a Redis Cluster: one script call per shard, pipelined per master.

Handlers `submit` an action and await its future, as with `ApplyBatcher`. Whatever is pending
when a lane is free goes as one batch, in two phases. First each key is claimed in its own
shard (claim_batch.lua: the same key with another card is a mismatch there, although the
records are per card shard); then the claimed (or already held) keys are applied in their
card's shard (apply_batch.lua without claims). In each phase the actions are grouped by shard
(one slot: every key of a group carries the shard's tag), the groups by the master serving the
slot, from the cluster client's slot map. Each master gets one pipeline on one of its
connections: the groups' script calls, then (with `wait_replicas` > 0) `WAIT`, so WAIT counts
exactly the writes of those calls. The masters of a phase are written to concurrently.

redis-py's `RedisCluster` keeps the slot map (refreshed after any failure of a master's
pipeline: a dead master, MOVED after a failover, READONLY from a demoted one, CLUSTERDOWN);
the calls themselves go on one raw connection per master (`RawConnection`, opened like a
redis-py client of that master, packed by hiredis), because WAIT must follow the script on the
same connection, which the cluster client's pipeline does not promise. Lanes share a master's
connection: replies come back in order, and a WAIT covering other lanes' writes too only
waits for more. A failed call fails the actions of that master only (503); the script may
have run, and a retry of the same key is answered from the record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError

from app.action_service.apply_script import (
    ApplyResult,
    NotReplicatedError,
    ScriptActionError,
    ScriptLimits,
    apply_script_source,
    call_args,
    claim_call_args,
    claim_script_source,
    parse_claims,
    parse_reply,
)
from app.action_service.batcher import BatchObserver, BatchQueue
from app.action_service.raw_connection import RawConnection
from app.action_service.redis_keys import SHARD_KEYS, shard_of
from app.actions.action import Action

logger = logging.getLogger(__name__)

#: Builds a plain client of one master (host, port), configured like the cluster client.
NodeClientFactory = Callable[[str, int], Redis]
_Pending = tuple[Action, "asyncio.Future[ApplyResult]", "Callable[[], None] | None"]


@dataclass(frozen=True, slots=True)
class _Phase:
    """One script of the two: how to call it, parse it, and which answers need replicas."""

    source: Callable[[], str]
    args: Callable[[list[Action], ScriptLimits], tuple[Any, ...]]
    parse: Callable[[Any, int], list[Any]]
    needs_replicas: Callable[[Any], bool]


def _parse_claims(reply: Any, count: int) -> list[Any]:
    now_ms, verdicts = parse_claims(reply, count)
    return [ScriptActionError("claim refused: the key's claim is not a string")
            if v == "error" else (now_ms, v) for v in verdicts]


#: Phase 1: claim each key on its key shard's master (a written claim must be replicated).
_CLAIM = _Phase(claim_script_source, claim_call_args, _parse_claims,
                lambda r: isinstance(r, tuple) and r[1] == "claimed")
#: Phase 2: apply on the card shard's master (201 and 200 need the replicas, see
#: `require_replicas`).
_APPLY = _Phase(apply_script_source, lambda a, lim: call_args(a, lim, claims=False), parse_reply,
                lambda r: isinstance(r, ApplyResult) and r.verdict in ("created", "replay"))


class ClusterApplyBatcher(BatchQueue):
    """Queues actions and applies them per shard and master, up to `lanes` batches at once."""

    def __init__(
        self,
        cluster: RedisCluster,
        node_client: NodeClientFactory,
        limits: ScriptLimits,
        *,
        lanes: int,
        max_batch: int,
        observer: BatchObserver | None = None,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 0,
    ) -> None:
        super().__init__(limits, lanes=lanes, max_batch=max_batch, observer=observer,
                         wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)
        self._cluster = cluster
        self._node_client = node_client
        self._clients: dict[tuple[str, int], Redis] = {}
        self._conns: dict[tuple[str, int], RawConnection] = {}
        self._opening: dict[tuple[str, int], asyncio.Lock] = {}
        self._stale_map = False
        self._refresh_lock = asyncio.Lock()

    def _has_free_lane(self) -> bool:
        return len(self._tasks) < self._lanes

    def _dispatch(self) -> None:
        self._scheduled = False
        loop = asyncio.get_running_loop()
        while len(self._tasks) < self._lanes and self._pending and not self._closed:
            batch = self._next_batch()
            task = loop.create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._lane_free)

    def _lane_free(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._pending and not self._closed:
            self._dispatch()

    async def _run(self, batch: list[_Pending]) -> None:
        started = time.perf_counter()
        results: list[Any]
        try:
            results = await self._apply([p[0] for p in batch])
        except Exception as exc:  # routing failed (no slot map): the whole batch shares it
            self._stale_map = True
            results = [exc] * len(batch)
        if self._observer is not None:
            self._observer.batch_done(len(batch), time.perf_counter() - started)
        self._resolve(batch, results)

    async def _apply(self, actions: list[Action]) -> list[Any]:
        """One result (or exception) per action: first its key's claim on the key shard's
        master, then (claimed or held keys only) its card shard's call on that master; each
        phase's pipeline per master ends with WAIT."""
        await self._ensure_map()
        results: list[Any] = [None] * len(actions)
        claims: list[Any] = [None] * len(actions)
        await self._phase(actions, [shard_of(a.idempotency_key) for a in actions],
                          _CLAIM, claims)
        now_ms = 0
        go: list[int] = []
        for i, claim in enumerate(claims):
            if isinstance(claim, BaseException):
                results[i] = claim
            elif claim[1] in ("held", "claimed"):
                go.append(i)
            else:
                now_ms = claim[0]
                results[i] = ApplyResult(claim[1], now_ms)  # mismatch, gone, future
        if go:
            applied: list[Any] = [None] * len(go)
            chosen = [actions[i] for i in go]
            await self._phase(chosen, [shard_of(a.card_id) for a in chosen], _APPLY,
                              applied)
            for i, result in zip(go, applied, strict=True):
                results[i] = result
        return results

    async def _phase(self, actions: list[Action], shards: list[int], phase: _Phase,
                     out: list[Any]) -> None:
        """Group `actions` by shard, the shards by master, and run `phase` per master."""
        by_shard: dict[int, list[int]] = {}
        for i, shard in enumerate(shards):
            by_shard.setdefault(shard, []).append(i)
        masters: dict[tuple[str, int], list[list[int]]] = {}
        for shard, indexes in by_shard.items():
            node = self._cluster.get_node_from_key(SHARD_KEYS[shard][0])
            if node is None:
                raise RedisConnectionError(f"no master known for shard {shard}")
            masters.setdefault((node.host, node.port), []).append(indexes)
        await asyncio.gather(*(self._on_master(address, groups, actions, phase, out)
                               for address, groups in masters.items()))

    async def _on_master(self, address: tuple[str, int], groups: list[list[int]],
                         actions: list[Action], phase: _Phase, out: list[Any]) -> None:
        """The groups' script calls and WAIT written at once on `address`'s connection;
        NOSCRIPT (a fresh or promoted node) loads the script and sends the groups that met
        it once more, behind the SCRIPT LOAD."""
        todo = groups
        preamble: tuple[bytes, ...] = ()
        for attempt in range(2):
            calls = [phase.args([actions[i] for i in group], self._limits) for group in todo]
            try:
                replies = await self._pipeline(address, calls, preamble)
            except RedisError as exc:  # the connection could not be opened
                logger.warning("script call on a cluster master failed error=%s",
                               type(exc).__name__)
                self._stale_map = True
                for group in todo:
                    for i in group:
                        out[i] = exc
                return
            acked = replies[-1] if self._wait_replicas else 0
            retry: list[list[int]] = []
            for group, reply in zip(todo, replies, strict=False):
                if isinstance(reply, NoScriptError) and attempt == 0:
                    retry.append(group)
                    continue
                for i, answer in zip(group, self._answers(phase, reply, len(group), acked),
                                     strict=True):
                    out[i] = answer
            if not retry:
                return
            todo = retry
            preamble = (hiredis.pack_command(("SCRIPT", "LOAD", phase.source())),)

    async def _pipeline(self, address: tuple[str, int], calls: list[tuple[Any, ...]],
                        preamble: tuple[bytes, ...]) -> list[Any]:
        """Write `preamble`, `calls` and WAIT on the master's connection in one go; the replies
        to `calls` (and WAIT's), each a value or the exception for it."""
        conn = await self._connection(address)
        commands = [*preamble, *(hiredis.pack_command(call) for call in calls)]
        if self._wait:
            commands.append(self._wait)
        done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        replies: list[Any] = [None] * len(commands)
        left = [len(commands)]

        def reply_to(i: int) -> Callable[[Any], None]:
            def on_reply(reply: Any) -> None:
                replies[i] = reply
                left[0] -= 1
                if not left[0] and not done.done():
                    done.set_result(replies)
            return on_reply

        for i, command in enumerate(commands):
            conn.send(command, reply_to(i))
        return (await done)[len(preamble):]

    async def _connection(self, address: tuple[str, int]) -> RawConnection:
        """The master's raw connection (shared by the lanes: replies come back in order),
        opened like a redis-py client of it (TLS, AUTH), once at a time."""
        conn = self._conns.get(address)
        if conn is None:
            client = self._node_client(*address)
            self._clients[address] = client
            pool = client.connection_pool
            kwargs = pool.connection_kwargs
            conn = self._conns[address] = RawConnection(
                lambda: pool.connection_class(**kwargs), kwargs.get("socket_timeout"))
            self._opening[address] = asyncio.Lock()
        if not conn.is_open():
            async with self._opening[address]:
                if not conn.is_open():
                    await conn.open()
        return conn

    def _answers(self, phase: _Phase, reply: Any, count: int, acked: Any) -> list[Any]:
        if isinstance(reply, BaseException):
            if not isinstance(reply, NoScriptError):
                self._stale_map = True  # MOVED / READONLY / CLUSTERDOWN: re-read the map
            return [reply] * count
        if isinstance(acked, BaseException):
            return [acked] * count
        try:
            parsed = phase.parse(reply, count)
        except RuntimeError as exc:
            return [exc] * count
        if not self._wait_replicas or int(acked) >= self._wait_replicas:
            return parsed
        error = NotReplicatedError(int(acked), self._wait_replicas, self._wait_timeout_ms)
        return [error if phase.needs_replicas(r) else r for r in parsed]

    async def _ensure_map(self) -> None:
        """The cluster client's slot map, read once and again after a master failed."""
        await self._cluster.initialize()
        if not self._stale_map:
            return
        async with self._refresh_lock:
            if self._stale_map:
                self._stale_map = False
                try:
                    await self._cluster.nodes_manager.initialize()
                except Exception:
                    self._stale_map = True
                    raise

    async def close(self) -> None:
        """Let batches in flight finish, fail what is still queued, close the node clients."""
        self._closed = True
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._fail_queued()
        for conn in self._conns.values():
            await conn.disconnect()
        for client in self._clients.values():
            await client.aclose()
        self._conns.clear()
        self._clients.clear()
