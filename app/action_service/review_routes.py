"""HTTP handlers of the review queue: GET /v1/reviews?status=open, GET /v1/reviews/{id},
POST /v1/reviews/{id}/close (see reviews.py for what closing does)."""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web

from app.action_service.appkeys import IN_FLIGHT, STORE
from app.action_service.replies import error_reply, idempotency_key, json_reply
from app.action_service.reviews import (
    MAX_LIMIT,
    CloseRequest,
    ReviewError,
    ReviewQueue,
    parse_review_id,
)

logger = logging.getLogger(__name__)

MAX_CLOSE_BODY_BYTES: Final = 4 * 1024


async def get_reviews(request: web.Request) -> web.Response:
    """The open reviews, oldest first (`limit`, default 100), with the queue's depth and the
    oldest one's age."""
    for name in request.query:
        if name not in ("status", "limit"):
            shown = name[:64]
            return error_reply(422, f"{shown}: unknown query parameter (allowed: status, limit)",
                               shown)
    status = request.query.get("status", "open")
    if status != "open":
        return error_reply(422, "status: only open reviews are listed (GET /v1/reviews/{id} "
                           "shows a closed one)", "status")
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        return error_reply(422, f"limit: an integer in [1, {MAX_LIMIT}]", "limit")
    reviews, depth, oldest = await ReviewQueue(request.app[STORE]).open_reviews(limit)
    return json_reply({"reviews": reviews, "open": depth, "oldest_queued_at_ms": oldest})


async def get_review(request: web.Request) -> web.Response:
    """One review, open or closed (with how it was closed)."""
    try:
        shard, entry_id = parse_review_id(request.match_info["review_id"])
    except ReviewError as exc:
        return error_reply(422, exc.reason, exc.field)
    review = await ReviewQueue(request.app[STORE]).review(shard, entry_id)
    if review is None:
        return error_reply(404, "no such review", "id")
    return json_reply(review)


async def close_review(request: web.Request, by: str) -> web.Response:
    """Close a review as fraud or legitimate, once per Idempotency-Key (201 first, 200 replayed
    with the same key and body, 409 closed before under another key or body)."""
    key = idempotency_key(request)
    if isinstance(key, web.Response):
        return key
    try:
        shard, entry_id = parse_review_id(request.match_info["review_id"])
    except ReviewError as exc:
        return error_reply(422, exc.reason, exc.field)
    if request.content_length is not None and request.content_length > MAX_CLOSE_BODY_BYTES:
        return error_reply(413, f"body is over {MAX_CLOSE_BODY_BYTES} bytes", None)
    raw = await request.read()
    try:
        asked = CloseRequest.from_json(raw)
    except ReviewError as exc:
        return error_reply(422, exc.reason, exc.field)
    in_flight = request.app[IN_FLIGHT]
    flight_key = f"review {shard}-{entry_id}"
    if flight_key in in_flight:
        return error_reply(409, "this review is being closed by another request", "id")
    in_flight.add(flight_key)
    try:  # Redis errors are answered 503 by `observed`
        verdict, body = await ReviewQueue(request.app[STORE]).close(shard, entry_id, key,
                                                                    asked, by)
    finally:
        in_flight.discard(flight_key)
    if verdict == "missing":
        return error_reply(404, "no such review", "id")
    if verdict == "closed":
        return json_reply({"error": "the review is closed already (under another "
                           "Idempotency-Key or body)", "field": "id", "close": body}, 409)
    if verdict == "replay":
        return json_reply(body, 200, {"Idempotent-Replayed": "true"})
    logger.info("review closed outcome=%s card=%s by=%s", body["outcome"], body["card"], by)
    return json_reply(body, 201)
