"""The Redis side of the action service: key names, the atomic apply script and read views."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, Literal

import orjson
from redis.asyncio import Redis

from app.actions.action import Action
from app.actions.key import action_fingerprint

#: Stream with one entry per key answered 201: the ledger that proves "exactly once".
EFFECTS_STREAM: Final = "effects"
#: Stream of queued customer alerts, for a notifier to consume.
ALERTS_STREAM: Final = "alerts"
#: Hash of durable counters; field `replays` counts redeliveries absorbed (answered 200 replayed).
STATS_KEY: Final = "stats"

Verdict = Literal["created", "replay", "mismatch", "gone", "future"]
_VERDICTS: Final = frozenset(("created", "replay", "mismatch", "gone", "future"))


def idem_key(key: str) -> str:
    """Redis hash holding an idempotency key's record (expires after the key TTL)."""
    return f"idem:{key}"


def card_key(card_id: str) -> str:
    """Redis hash holding a card's status (status, frozen_at_ms, reason, ...)."""
    return f"card:{card_id}"


def card_alerts_key(card_id: str) -> str:
    """Redis list of a card's newest alerts (JSON objects), oldest first."""
    return f"card:{card_id}:alerts"


@functools.cache
def apply_script_source() -> str:
    """Text of the Lua script that records a key and applies its effect atomically."""
    return resources.files("app.action_service").joinpath("apply_action.lua").read_text("utf-8")


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What the apply script decided and the server time it used; for created and replay
    also the key's stored outcome, applied_at_ms and effect_id."""

    verdict: Verdict
    now_ms: int
    outcome: str | None = None
    applied_at_ms: int | None = None
    effect_id: str | None = None


class ActionStore:
    """Applies actions and reads records and cards; every write goes through one Lua script."""

    def __init__(self, redis: Redis, *, ttl_ms: int, margin_ms: int, alerts_per_card: int) -> None:
        if ttl_ms <= 0 or margin_ms < 0 or margin_ms >= ttl_ms:
            raise ValueError(f"need 0 <= margin < ttl, got ttl_ms={ttl_ms} margin_ms={margin_ms}")
        if alerts_per_card < 1:
            raise ValueError(f"alerts_per_card must be >= 1, got {alerts_per_card}")
        self._redis = redis
        self._ttl_ms = ttl_ms
        self._margin_ms = margin_ms
        self._alerts_per_card = alerts_per_card
        self._apply = redis.register_script(apply_script_source())

    @property
    def max_age_ms(self) -> int:
        """Unknown keys of actions decided this long ago (or longer) are refused with 410."""
        return self._ttl_ms - self._margin_ms

    async def apply(self, action: Action) -> ApplyResult:
        """Run the apply script for one action (one round trip, atomic in Redis)."""
        keys = [
            idem_key(action.idempotency_key),
            card_key(action.card_id),
            card_alerts_key(action.card_id),
            EFFECTS_STREAM,
            ALERTS_STREAM,
            STATS_KEY,
        ]
        args = [
            action.idempotency_key,
            action_fingerprint(action),
            action.type,
            action.card_id,
            action.txn_id,
            action.ts_ms,
            repr(action.score),
            action.model_version,
            action.decided_at_ms,
            self._ttl_ms,
            self.max_age_ms,
            self._margin_ms,
            self._alerts_per_card,
            f"freeze_card by model {action.model_version} (score {action.score:.6g})",
        ]
        reply = await self._apply(keys=keys, args=args)
        verdict, now_ms = reply[0], int(reply[1])
        if verdict not in _VERDICTS:
            raise RuntimeError(f"apply script returned an unknown verdict {verdict!r}")
        if verdict in ("created", "replay"):
            return ApplyResult(verdict, now_ms, reply[2], int(reply[3]), reply[4])
        return ApplyResult(verdict, now_ms)

    async def record(self, key: str) -> tuple[dict[str, str], int] | None:
        """A key's stored record and its remaining lifetime in ms, or None if unknown."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(idem_key(key))
            pipe.pttl(idem_key(key))
            record, pttl = await pipe.execute()
        return (record, int(pttl)) if record else None

    async def card(self, card_id: str) -> tuple[dict[str, str], list[str]]:
        """A card's hash and its alert list (JSON strings), read as one snapshot."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(card_key(card_id))
            pipe.lrange(card_alerts_key(card_id), 0, -1)
            fields, alerts = await pipe.execute()
        return fields, alerts

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
    }


def render_card(card_id: str, fields: dict[str, str], alerts: list[str]) -> dict[str, Any]:
    """The GET /v1/cards/{card_id} body; a card never acted on is active with no alerts."""
    frozen = fields.get("status") == "frozen"
    return {
        "card_id": card_id,
        "status": "frozen" if frozen else "active",
        "frozen_at_ms": int(fields["frozen_at_ms"]) if frozen else None,
        "reason": fields.get("reason") if frozen else None,
        "txn_id": fields.get("txn_id") if frozen else None,
        "alerts_total": int(fields.get("alerts_total", 0)),
        "alerts": [_render_alert(orjson.loads(raw)) for raw in alerts],
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
    }
