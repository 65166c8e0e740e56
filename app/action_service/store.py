"""The Redis side of the action service: applying actions (through the batcher) and read views."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import orjson
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from app.action_service.apply_script import ApplyResult, NotReplicatedError, ScriptLimits
from app.action_service.batcher import ApplyBatcher, BatchObserver, ScriptConnection
from app.action_service.cluster_batcher import ClusterApplyBatcher, NodeClientFactory
from app.action_service.decisions import (
    DecisionRequest,
    DecisionResult,
    decide_args,
    decide_script_sha,
    decide_script_source,
)
from app.action_service.raw_connection import RawConnection
from app.action_service.redis_keys import (
    card_alerts_key,
    card_history_key,
    card_key,
    claim_key,
    decision_keys,
    idem_key,
)
from app.actions.action import Action


class Applier(Protocol):
    """Applies queued actions in batches (`ApplyBatcher`, `ClusterApplyBatcher`)."""

    def submit(
        self, action: Action, settled: Callable[[], None] | None = None
    ) -> asyncio.Future[ApplyResult]: ...

    async def close(self) -> None: ...


class ActionStore:
    """Applies actions and reads records and cards; every write goes through one Lua script.

    `redis` is a single node's client (`Redis`: one script call per batch, on the batcher's
    dedicated connections) or a cluster's (`RedisCluster`: one call per shard, on per-master
    clients from `node_client`). With `wait_replicas` > 0 an answer waits for that many
    replicas to acknowledge the write (WAIT, `wait_timeout_ms`), else it fails with 503.
    """

    def __init__(
        self,
        redis: Redis | RedisCluster,
        *,
        ttl_ms: int,
        margin_ms: int,
        alerts_per_card: int,
        apply_connections: int = 2,
        apply_max_batch: int = 256,
        observer: BatchObserver | None = None,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 0,
        node_client: NodeClientFactory | None = None,
    ) -> None:
        if ttl_ms <= 0 or margin_ms < 0 or margin_ms >= ttl_ms:
            raise ValueError(f"need 0 <= margin < ttl, got ttl_ms={ttl_ms} margin_ms={margin_ms}")
        if alerts_per_card < 1:
            raise ValueError(f"alerts_per_card must be >= 1, got {alerts_per_card}")
        self._redis = redis
        self._cluster = isinstance(redis, RedisCluster)
        self._wait = (wait_replicas, wait_timeout_ms)
        self._node_client = node_client
        self._limits = ScriptLimits(ttl_ms, ttl_ms - margin_ms, margin_ms, alerts_per_card)
        self._batcher: Applier
        if isinstance(redis, RedisCluster):
            if node_client is None:
                raise ValueError("a cluster client needs node_client (per-master clients)")
            self._batcher = ClusterApplyBatcher(
                redis, node_client, self._limits, lanes=apply_connections,
                max_batch=apply_max_batch, observer=observer, wait_replicas=wait_replicas,
                wait_timeout_ms=wait_timeout_ms)
        else:
            self._batcher = ApplyBatcher(
                self._dedicated_connection,
                self._limits,
                lanes=apply_connections,
                max_batch=apply_max_batch,
                observer=observer,
                wait_replicas=wait_replicas,
                wait_timeout_ms=wait_timeout_ms,
            )

    @property
    def is_cluster(self) -> bool:
        """True when the store talks to a Redis Cluster."""
        return self._cluster

    def _dedicated_connection(self) -> ScriptConnection:
        """A raw connection opened like the client's own (kind and options), outside its pool;
        it connects lazily and waits for a reply as long as the client's socket timeout."""
        pool = self._redis.connection_pool  # type: ignore[union-attr]  # a node's client
        kwargs = pool.connection_kwargs
        return RawConnection(lambda: pool.connection_class(**kwargs),
                             kwargs.get("socket_timeout"))

    @property
    def max_age_ms(self) -> int:
        """Unknown keys of actions decided this long ago (or longer) are refused with 410."""
        return self._limits.max_age_ms

    def submit(
        self, action: Action, settled: Callable[[], None] | None = None
    ) -> asyncio.Future[ApplyResult]:
        """Queue one action; it goes with whatever else is pending as one script call.
        `settled` runs when Redis has answered that call (see `ApplyBatcher.submit`)."""
        return self._batcher.submit(action, settled)

    async def apply(self, action: Action) -> ApplyResult:
        """Apply one action (`submit` and wait for Redis's answer)."""
        return await self._batcher.submit(action)

    async def aclose(self) -> None:
        """Finish the batches in flight and close the dedicated connections."""
        await self._batcher.close()

    async def record(self, key: str) -> tuple[dict[str, str], int] | None:
        """A key's stored record and its remaining lifetime in ms, or None if unknown.

        The key names no card: its claim (in the key's own shard) says which card, so which
        card shard, holds the record. Two reads, each in one slot.
        """
        claim = await self._redis.get(claim_key(key))  # "<fingerprint> <card_id>"
        if claim is None:
            return None
        card_id = claim.split(" ", 1)[1]
        name = idem_key(key, card_id)
        async with self._redis.pipeline(transaction=not self._cluster) as pipe:
            pipe.hgetall(name)
            pipe.pttl(name)
            record, pttl = await pipe.execute()
        return (record, int(pttl)) if record else None

    async def decide(self, key: str, request: DecisionRequest, by: str) -> DecisionResult:
        """Record and apply an analyst decision in one call of decide.lua (every key in the
        card's slot); with `wait_replicas` > 0, WAIT follows on the same connection and too few
        acknowledgements raise NotReplicatedError (the retry is answered from the record)."""
        keys = decision_keys(key, request.card_id)
        args = decide_args(key, request, by, ttl_ms=self._limits.ttl_ms,
                           history_kept=self._limits.alerts_per_card)
        reply, acked = await self.script(decide_script_source(), decide_script_sha(), keys, args)
        result = DecisionResult.from_reply(reply)
        replicas, timeout_ms = self._wait
        if replicas and result.verdict != "mismatch" and acked < replicas:
            raise NotReplicatedError(acked, replicas, timeout_ms)
        return result

    @property
    def history_kept(self) -> int:
        """Events kept per card history (the scripts' LTRIM)."""
        return self._limits.alerts_per_card

    async def script(self, source: str, sha: str, keys: tuple[str, ...], args: list[str]
                     ) -> tuple[Any, int]:
        """One call of a Lua script whose keys are all in one slot (`keys[1]`'s node on a
        cluster), then WAIT when replicas are asked for: (its reply, replicas acknowledged)."""
        if not self._cluster:
            return await self._script_on(self._redis, source, sha, keys, args)  # type: ignore[arg-type]
        if self._node_client is None:
            raise RuntimeError("a cluster store needs node_client")
        node = self._redis.get_node_from_key(keys[1])  # type: ignore[union-attr]
        client = self._node_client(node.host, node.port)
        try:
            return await self._script_on(client, source, sha, keys, args)
        finally:
            await client.aclose()

    async def _script_on(self, client: Redis, source: str, sha: str, keys: tuple[str, ...],
                         args: list[str]) -> tuple[Any, int]:
        replicas, timeout_ms = self._wait
        for attempt in range(2):
            async with client.pipeline(transaction=False) as pipe:
                if attempt:  # the script was not loaded yet (a new or restarted Redis)
                    pipe.script_load(source)
                pipe.evalsha(sha, len(keys), *keys, *args)
                if replicas:
                    pipe.execute_command("WAIT", replicas, timeout_ms)
                try:
                    replies = await pipe.execute()
                except NoScriptError:
                    if attempt:
                        raise
                    continue
            replies = replies[1:] if attempt else replies
            return replies[0], (int(replies[1]) if replicas else 0)
        raise AssertionError("unreachable")

    @property
    def redis(self) -> Redis | RedisCluster:
        """The service's client (readers of the shards' streams and sets use it)."""
        return self._redis

    async def card(self, card_id: str) -> tuple[dict[str, str], list[str], list[str]]:
        """A card's hash, its alert list and its history (JSON strings), read as one snapshot
        (MULTI/EXEC: every key is in the card's slot, so this holds on a cluster too)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(card_key(card_id))
            pipe.lrange(card_alerts_key(card_id), 0, -1)
            pipe.lrange(card_history_key(card_id), 0, -1)
            fields, alerts, history = await pipe.execute()
        return fields, alerts, history

    async def ping(self) -> bool:
        """True when Redis answers PING."""
        return bool(await self._redis.ping())


def render_result(action: Action, applied: ApplyResult) -> dict[str, Any]:
    """The POST /v1/actions body for a created or replayed key.

    On a replay the fingerprint matched, so key, type, card_id, txn_id and ts_ms equal the
    stored ones; outcome, applied_at_ms and effect_id come from the record. The body is
    therefore the same for the first answer and every replay.
    """
    if applied.outcome is None or applied.applied_at_ms is None or applied.effect_id is None:
        raise ValueError(f"no stored result for verdict {applied.verdict!r}")
    return {
        "idempotency_key": action.idempotency_key,
        "type": action.type,
        "card_id": action.card_id,
        "txn_id": action.txn_id,
        "ts_ms": action.ts_ms,
        "outcome": applied.outcome,
        "applied_at_ms": applied.applied_at_ms,
        "effect_id": applied.effect_id,
    }


def render_stored_result(record: dict[str, str]) -> dict[str, Any]:
    """The same body as `render_result`, read back from a key's stored record."""
    return {
        "idempotency_key": record["idempotency_key"],
        "type": record["type"],
        "card_id": record["card_id"],
        "txn_id": record["txn_id"],
        "ts_ms": int(record["ts_ms"]),
        "outcome": record["outcome"],
        "applied_at_ms": int(record["applied_at_ms"]),
        "effect_id": record["effect_id"],
    }


def render_record(record: dict[str, str], expires_in_ms: int) -> dict[str, Any]:
    """The GET /v1/actions/{key} body: the stored result plus who decided it and when."""
    return {
        "idempotency_key": record["idempotency_key"],
        "status": 201,
        "result": render_stored_result(record),
        "fingerprint": record["fingerprint"],
        "score": float(record["score"]),
        "model_version": record["model_version"],
        "decided_at_ms": int(record["decided_at_ms"]),
        "expires_in_ms": max(expires_in_ms, 0),
        "explanation": _explanation(record.get("explanation")),
        **_decider(record),
    }


def _decider(stored: dict[str, str]) -> dict[str, Any]:
    """decided_by and rule as stored (an effect applied before lists existed: the model)."""
    return {"decided_by": stored.get("decided_by") or "model", "rule": stored.get("rule") or None}


def _explanation(stored: str | None) -> list[dict[str, Any]] | None:
    """A stored explanation (JSON text written by the apply script), or None."""
    return orjson.loads(stored) if stored else None


def render_card(card_id: str, fields: dict[str, str], alerts: list[str],
                history: Sequence[str] = ()) -> dict[str, Any]:
    """The GET /v1/cards/{card_id} body; a card never acted on is active with no alerts.
    `history` is the card's newest status events (frozen, released, confirmed), oldest first."""
    frozen = fields.get("status") == "frozen"
    released = "released_at_ms" in fields
    return {
        "card_id": card_id,
        "status": "frozen" if frozen else "active",
        "frozen_at_ms": int(fields["frozen_at_ms"]) if frozen else None,
        "reason": fields.get("reason") if frozen else None,
        "txn_id": fields.get("txn_id") if frozen else None,
        "explanation": _explanation(fields.get("explanation")) if frozen else None,
        "decided_by": _decider(fields)["decided_by"] if frozen else None,
        "rule": _decider(fields)["rule"] if frozen else None,
        "released_at_ms": int(fields["released_at_ms"]) if released else None,
        "released_by": fields.get("released_by"),
        "confirmed_fraud": "confirmed_at_ms" in fields,
        "alerts_total": int(fields.get("alerts_total", 0)),
        "alerts": [_render_alert(orjson.loads(raw)) for raw in alerts],
        "history": [_render_event(orjson.loads(raw)) for raw in history],
    }


def _render_event(event: dict[str, str]) -> dict[str, Any]:
    return {
        "event": event["event"],
        "at_ms": int(event["at_ms"]),
        "by": event["by"],
        "reason": event["reason"],
        "txn_id": event.get("txn_id") or None,
        "idempotency_key": event["idempotency_key"],
        "effect_id": event["effect_id"],
    }


def _render_alert(alert: dict[str, str]) -> dict[str, Any]:
    return {
        "alert_id": alert["alert_id"],
        "txn_id": alert["txn_id"],
        "idempotency_key": alert["idempotency_key"],
        "ts_ms": int(alert["ts_ms"]),
        "score": float(alert["score"]),
        "model_version": alert["model_version"],
        "queued_at_ms": int(alert["queued_at_ms"]),
        "explanation": _explanation(alert.get("explanation")),
        **_decider(alert),
    }
