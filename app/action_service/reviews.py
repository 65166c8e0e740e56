"""The review queue: transactions a rule sent to `review`, listed oldest first and closed by an
analyst as fraud or legitimate (GET /v1/reviews, GET /v1/reviews/{id}, POST
/v1/reviews/{id}/close).

A `review` action is applied like any other (apply_batch.lua): exactly once per key, into its
card's shard, as one entry of the shard's review stream and a member of its open set. A review's
id is `<shard>-<entry id>`. Closing it is one call of review_close.lua in that shard: the label
(1 for fraud, 0 for legitimate) is written to the labels outbox, the card follows (fraud freezes
it, legitimate releases a card frozen for this very transaction), and the close is recorded
with its Idempotency-Key: the same key and body answer the same (200), a second close of a
closed review under another key or body is a 409 carrying the first close.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, Literal

import orjson

from app.action_service.redis_keys import (
    REVIEW_STREAMS,
    REVIEWS_OPEN,
    SHARDS,
    review_close_keys,
)
from app.errors import FieldError

ReviewOutcome = Literal["fraud", "legitimate"]
OUTCOMES: Final[tuple[ReviewOutcome, ...]] = ("fraud", "legitimate")
REVIEW_ID_RE: Final = re.compile(r"(\d{1,2})-(\d{1,20}-\d{1,20})")
MAX_REASON_CHARS: Final = 500
#: The most reviews one GET answers.
MAX_LIMIT: Final = 1_000
FINGERPRINT_SCHEME: Final = "fraudstream.review-close-fingerprint.v1"
_CLOSE_FIELDS: Final = ("outcome", "reason")


class ReviewError(FieldError):
    """A request that is not acceptable; `field` names the culprit (answered 422)."""


def parse_review_id(review_id: str) -> tuple[int, str]:
    """(shard, stream entry id) of a review id; ReviewError when it is not one."""
    m = REVIEW_ID_RE.fullmatch(review_id)
    if (m is None or int(m.group(1)) >= SHARDS
            or any(int(part) >= 2**64 for part in m.group(2).split("-"))):
        raise ReviewError("id", "id: a review id, <shard>-<ms>-<seq>")
    return int(m.group(1)), m.group(2)


@dataclass(frozen=True, slots=True)
class CloseRequest:
    """How an analyst closes a review, and why."""

    outcome: ReviewOutcome
    reason: str

    @classmethod
    def from_json(cls, raw: bytes) -> CloseRequest:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ReviewError(None, "body: not valid JSON") from None
        if not isinstance(body, dict):
            raise ReviewError(None, "body: must be a JSON object")
        for name in body:
            if name not in _CLOSE_FIELDS:
                raise ReviewError(str(name)[:64], f"{str(name)[:64]}: unknown field (allowed: "
                                  "outcome, reason)")
        outcome = body.get("outcome")
        if outcome not in OUTCOMES:
            raise ReviewError("outcome", "outcome: required, fraud or legitimate")
        reason = body.get("reason", "")
        if (not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS
                or not reason.isprintable()):
            raise ReviewError("reason", f"reason: at most {MAX_REASON_CHARS} printable "
                              "characters")
        return cls(outcome, reason)

    def fingerprint(self, review_id: str, key: str) -> str:
        encoded = orjson.dumps([FINGERPRINT_SCHEME, review_id, key, self.outcome, self.reason])
        return hashlib.sha256(encoded).hexdigest()


@functools.cache
def close_script_source() -> str:
    return resources.files("app.action_service").joinpath("review_close.lua").read_text("utf-8")


@functools.cache
def close_script_sha() -> str:
    return hashlib.sha1(close_script_source().encode("utf-8"), usedforsecurity=False).hexdigest()


def render_review(shard: int, entry_id: str, fields: dict[str, str], *,
                  closed: dict[str, str] | None = None) -> dict[str, Any]:
    """A review as the API shows it."""
    explanation = fields.get("explanation") or None
    out: dict[str, Any] = {
        "id": f"{shard}-{entry_id}",
        "status": "closed" if closed else "open",
        "card_id": fields.get("card_id"),
        "txn_id": fields.get("txn_id"),
        "ts_ms": int(fields.get("ts_ms") or 0),
        "score": float(fields.get("score") or "nan"),
        "model_version": fields.get("model_version"),
        "queued_at_ms": int(fields.get("queued_at_ms") or 0),
        "decided_by": fields.get("decided_by") or "model",
        "rule": fields.get("rule") or None,
        "explanation": orjson.loads(explanation) if explanation else None,
        "idempotency_key": fields.get("idempotency_key"),
    }
    if closed:
        out["close"] = render_close(closed)
    return out


def render_close(stored: dict[str, str]) -> dict[str, Any]:
    return {"outcome": stored.get("outcome"), "card": stored.get("card_outcome"),
            "closed_at_ms": int(stored.get("closed_at_ms") or 0), "by": stored.get("by"),
            "reason": stored.get("reason"), "effect_id": stored.get("effect_id"),
            "idempotency_key": stored.get("idempotency_key")}


class ReviewQueue:
    """Reads the shards' review queues and closes reviews, through the service's store."""

    def __init__(self, store: Any) -> None:  # noqa: ANN401 - app.action_service.store
        self._store = store

    async def open_reviews(self, limit: int) -> tuple[list[dict[str, Any]], int, int | None]:
        """The `limit` oldest open reviews of every shard; the open count; the oldest's
        queued time (None: the queue is empty)."""
        redis = self._store.redis
        heads: list[tuple[float, int, str]] = []
        total = 0
        for shard, key in enumerate(REVIEWS_OPEN):
            members = await redis.zrange(key, 0, limit - 1, withscores=True)
            total += int(await redis.zcard(key))
            heads += [(float(score), shard, _text(member)) for member, score in members]
        heads.sort()
        out = []
        for _, shard, entry_id in heads[:limit]:
            found = await redis.xrange(REVIEW_STREAMS[shard], entry_id, entry_id)
            if found:
                out.append(render_review(shard, entry_id, _fields(found[0][1])))
        return out, total, (int(heads[0][0]) if heads else None)

    async def review(self, shard: int, entry_id: str) -> dict[str, Any] | None:
        """One review, open or closed (None: no such review)."""
        redis = self._store.redis
        found = await redis.xrange(REVIEW_STREAMS[shard], entry_id, entry_id)
        if not found:
            return None
        fields = _fields(found[0][1])
        closed = await redis.hgetall(review_close_keys(shard, entry_id,
                                                       fields.get("card_id", ""))[0])
        return render_review(shard, entry_id, fields,
                             closed={_text(k): _text(v) for k, v in closed.items()} or None)

    async def close(self, shard: int, entry_id: str, key: str, request: CloseRequest,
                    by: str) -> tuple[str, dict[str, Any]]:
        """(verdict, the close as stored): verdict created | replay | closed | missing."""
        review = await self.review(shard, entry_id)
        if review is None:
            return "missing", {}
        keys = review_close_keys(shard, entry_id, review["card_id"])
        args = [entry_id, key, request.fingerprint(f"{shard}-{entry_id}", key), request.outcome,
                request.reason, by, str(self._store.history_kept), review["card_id"]]
        reply, _ = await self._store.script(close_script_source(), close_script_sha(), keys, args)
        verdict, outcome, card_outcome, closed_at, effect_id, who, reason, stored_key = (
            _text(v) for v in reply)
        if verdict == "missing":
            return "missing", {}
        return verdict, {"review_id": f"{shard}-{entry_id}", "outcome": outcome,
                         "card": card_outcome, "closed_at_ms": int(closed_at),
                         "effect_id": effect_id, "by": who, "reason": reason,
                         "idempotency_key": stored_key, "card_id": review["card_id"],
                         "txn_id": review["txn_id"]}


def _text(value: Any) -> str:  # noqa: ANN401 - redis replies: bytes or str
    return value.decode() if isinstance(value, bytes) else str(value)


def _fields(raw: Any) -> dict[str, str]:  # noqa: ANN401
    return {_text(k): _text(v) for k, v in dict(raw).items()}
