"""Analyst decisions on a card (release, confirm): the request, its fingerprint, the script's reply.

A decision is applied by one call of decide.lua, every key of it in the card's slot (see
redis_keys.decision_keys), so it is atomic on a single Redis and on a cluster alike. Its
Idempotency-Key is scoped to the card (the record lives beside the card): the same key on the
same card with the same decision and body is a replay (200), with another decision or body a
422; on another card it names another decision.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, Literal

import orjson

from app.errors import FieldError
from app.ids import ID_RE, ID_RULE

Decision = Literal["release", "confirm"]
DECISIONS: Final[tuple[Decision, ...]] = ("release", "confirm")
MAX_REASON_CHARS: Final = 500
FINGERPRINT_SCHEME: Final = "fraudstream.decision-fingerprint.v1"
_FIELDS: Final = {"release": ("reason",), "confirm": ("reason", "txn_id")}


class DecisionError(FieldError):
    """A decision body that is not acceptable; `field` names the culprit (answered 422)."""


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    """One analyst decision as asked: which, on which card, why, and (confirm) which txn."""

    decision: Decision
    card_id: str
    reason: str
    txn_id: str | None = None

    @classmethod
    def from_json(cls, decision: Decision, card_id: str, raw: bytes) -> DecisionRequest:
        """Parse and check a request body (a JSON object: `reason`, and for confirm an optional
        `txn_id`); raises DecisionError naming the field."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise DecisionError(None, "body: not valid JSON") from None
        if not isinstance(body, dict):
            raise DecisionError(None, "body: must be a JSON object")
        allowed = _FIELDS[decision]
        for name in body:
            if name not in allowed:
                raise DecisionError(name, f"{name}: unknown field (allowed: {', '.join(allowed)})")
        reason = body.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise DecisionError("reason", "reason: required, a non-empty string")
        if len(reason) > MAX_REASON_CHARS or not reason.isprintable():
            raise DecisionError("reason", f"reason: at most {MAX_REASON_CHARS} printable "
                                "characters")
        txn_id = body.get("txn_id")
        if txn_id is not None and (not isinstance(txn_id, str) or not ID_RE.fullmatch(txn_id)):
            raise DecisionError("txn_id", f"txn_id: must be {ID_RULE}")
        return cls(decision, card_id, reason, txn_id)

    def fingerprint(self, key: str) -> str:
        """What tells a replay of this decision from a reuse of its key (who sent it is not
        part of it: the same request retried is the same decision)."""
        encoded = orjson.dumps([FINGERPRINT_SCHEME, key, self.decision, self.card_id,
                                self.reason, self.txn_id])
        return hashlib.sha256(encoded).hexdigest()


@dataclass(frozen=True, slots=True)
class DecisionResult:
    """What decide.lua answered: the verdict and, for created and replay, the stored record."""

    verdict: Literal["created", "replay", "mismatch"]
    outcome: str = ""
    applied_at_ms: int = 0
    effect_id: str = ""
    txn_id: str = ""
    by: str = ""
    reason: str = ""

    @classmethod
    def from_reply(cls, reply: list[Any]) -> DecisionResult:
        """The script's reply (verdict, outcome, applied_at_ms, effect_id, txn_id, by, reason)."""
        verdict, outcome, applied_at, effect_id, txn_id, by, reason = (
            v.decode() if isinstance(v, bytes) else str(v) for v in reply)
        if verdict == "mismatch":
            return cls("mismatch")
        if verdict not in ("created", "replay"):
            raise RuntimeError(f"decision script returned an unknown verdict {verdict!r}")
        return cls(verdict, outcome, int(applied_at), effect_id, txn_id, by,  # type: ignore[arg-type]
                   reason)

    def render(self, key: str, request: DecisionRequest) -> dict[str, Any]:
        """The response body (the same for the first answer and every replay)."""
        return {
            "idempotency_key": key,
            "decision": request.decision,
            "card_id": request.card_id,
            "outcome": self.outcome,
            "txn_id": self.txn_id or None,
            "reason": self.reason,
            "by": self.by,
            "applied_at_ms": self.applied_at_ms,
            "effect_id": self.effect_id,
        }


@functools.cache
def decide_script_source() -> str:
    """Text of the Lua script that records and applies one decision."""
    return resources.files("app.action_service").joinpath("decide.lua").read_text("utf-8")


@functools.cache
def decide_script_sha() -> str:
    """SHA1 of the decision script, as EVALSHA names it."""
    return hashlib.sha1(decide_script_source().encode("utf-8"),
                        usedforsecurity=False).hexdigest()


def decide_args(key: str, request: DecisionRequest, by: str, *, ttl_ms: int,
                history_kept: int) -> list[str]:
    """ARGV of decide.lua for `request` under `key`, decided by the token named `by`."""
    return [str(ttl_ms), str(history_kept), key, request.fingerprint(key), request.decision,
            request.card_id, request.reason, request.txn_id or "", by]
