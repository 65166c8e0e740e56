"""HTTP handlers of the action service and `setup_routes`, which mounts them."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Final

from aiohttp import hdrs, web
from redis.exceptions import RedisError

from app.action_service.appkeys import IN_FLIGHT, METRICS, SETTINGS, STORE, TOKENS
from app.action_service.decisions import (
    Decision,
    DecisionError,
    DecisionRequest,
)
from app.action_service.list_routes import delete_entry, get_lists, put_entry
from app.action_service.metrics import CONTENT_TYPE_LATEST
from app.action_service.observe import observed, unmatched
from app.action_service.openapi import build_openapi
from app.action_service.replies import RETRY_AFTER_S, error_reply, idempotency_key, json_reply
from app.action_service.review_routes import close_review, get_review, get_reviews
from app.action_service.rule_routes import get_rule, get_rules, patch_rule, post_rule
from app.action_service.store import render_card, render_record, render_result
from app.actions.action import Action, ActionError
from app.actions.key import KEY_RE
from app.ids import ID_RE, ID_RULE
from app.security.tokens import Access

logger = logging.getLogger(__name__)

#: Largest accepted request body; larger ones are answered 413 without being read further.
MAX_BODY_BYTES: Final = 64 * 1024
_UNAUTHORIZED_HEADERS: Final = {"WWW-Authenticate": 'Bearer realm="fraudstream"'}


def _access(request: web.Request) -> Access | None:
    """What the request's bearer token may do (compared in constant time, never logged)."""
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return request.app[TOKENS].access(given.strip())


def _unauthorized() -> web.Response:
    return error_reply(401, "missing or wrong bearer token", "Authorization", _UNAUTHORIZED_HEADERS)


def _forbidden() -> web.Response:
    return error_reply(403, "this token is read-only", "Authorization")


def _writer(request: web.Request) -> str | web.Response:
    """The name of a full-access bearer token, else the 401 or 403 to answer."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    who = request.app[TOKENS].identify(given.strip()) if scheme.lower() == "bearer" else None
    if who is None:
        return _unauthorized()
    access, by = who
    return by if access == "write" else _forbidden()


def card_ref(card_id: str) -> str:
    """A stable pseudonym of a card id for logs (card ids never appear in clear there)."""
    return hashlib.blake2b(card_id.encode(), digest_size=6, person=b"fs-card-log").hexdigest()


async def post_action(request: web.Request) -> web.Response:
    """Apply an action once per idempotency key (see docs/action-service.md for every status)."""
    access = _access(request)
    if access is None:
        return _unauthorized()
    if access != "write":
        return _forbidden()
    header_key = request.headers.get("Idempotency-Key", "")
    if not header_key:
        return error_reply(400, "the Idempotency-Key header is required", "Idempotency-Key")
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return error_reply(413, f"body is over {MAX_BODY_BYTES} bytes", None)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return error_reply(413, f"body is over {MAX_BODY_BYTES} bytes", None)
    try:
        action = Action.from_json(raw)
    except ActionError as exc:
        return error_reply(422, exc.reason, exc.field)
    if header_key != action.idempotency_key:
        return error_reply(
            422, "idempotency_key: must equal the Idempotency-Key header", "idempotency_key"
        )
    metrics = request.app[METRICS]
    in_flight = request.app[IN_FLIGHT]
    key = action.idempotency_key
    if key in in_flight:
        metrics.child(metrics.conflicts, "in_flight").inc()
        return error_reply(
            409, "a request with this Idempotency-Key is in flight", "idempotency_key"
        )
    in_flight.add(key)
    # The key leaves the in-flight set when Redis has answered its batch, not earlier: even
    # if this handler is cancelled, a second request cannot slip in while the first may run.
    result = await request.app[STORE].submit(action, lambda: in_flight.discard(key))
    if result.verdict == "created":
        body = render_result(action, result)
        metrics.child(metrics.effects, action.type, body["outcome"]).inc()
        if logger.isEnabledFor(logging.INFO):  # card_ref hashes: only when it is logged
            logger.info(
                "action applied key=%s type=%s card_ref=%s outcome=%s effect_id=%s",
                key,
                action.type,
                card_ref(action.card_id),
                body["outcome"],
                body["effect_id"],
            )
        return json_reply(body, 201, {"Location": f"/v1/actions/{key}"})
    if result.verdict == "replay":
        metrics.child(metrics.replays, action.type).inc()
        logger.info("action replay absorbed key=%s type=%s", key, action.type)
        return json_reply(render_result(action, result), 200, {"Idempotent-Replayed": "true"})
    if result.verdict == "mismatch":
        metrics.child(metrics.conflicts, "payload_mismatch").inc()
        return error_reply(
            422,
            "idempotency_key: already used for a different action "
            "(type, card_id, txn_id or ts_ms differ)",
            "idempotency_key",
        )
    if result.verdict == "gone":
        metrics.gone.inc()
        age_s = (result.now_ms - action.decided_at_ms) / 1000
        logger.warning("action refused as too old key=%s age_s=%.0f", key, age_s)
        return error_reply(
            410,
            f"decided_at_ms: the action was decided {age_s:.0f} s ago, past the key retention "
            "minus the safety margin; applying it now could apply it twice",
            "decided_at_ms",
        )
    return error_reply(
        422,
        "decided_at_ms: is further in the future than the allowed clock skew (the margin)",
        "decided_at_ms",
    )


async def get_action(request: web.Request) -> web.Response:
    """The stored record of an idempotency key, 404 if unknown or expired."""
    if _access(request) is None:
        return _unauthorized()
    key = request.match_info["idempotency_key"]
    if not KEY_RE.fullmatch(key):
        return error_reply(
            422, "idempotency_key: must be 32 lower-case hex characters", "idempotency_key"
        )
    found = await request.app[STORE].record(key)
    if found is None:
        return error_reply(
            404, "no record for this idempotency key (never applied, or expired)", None
        )
    record, pttl = found
    return json_reply(render_record(record, pttl))


async def get_card(request: web.Request) -> web.Response:
    """A card's status (active/frozen), why and when it was frozen, and its alerts."""
    if _access(request) is None:
        return _unauthorized()
    card_id = request.match_info["card_id"]
    if not ID_RE.fullmatch(card_id):
        return error_reply(422, f"card_id: must be {ID_RULE}", "card_id")
    fields, alerts, history = await request.app[STORE].card(card_id)
    return json_reply(render_card(card_id, fields, alerts, history))


async def _read_body(request: web.Request) -> bytes | web.Response:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return error_reply(413, f"body is over {MAX_BODY_BYTES} bytes", None)
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        return error_reply(413, f"body is over {MAX_BODY_BYTES} bytes", None)


def decision_handler(decision: Decision):  # noqa: ANN201 - an aiohttp handler
    """The handler of POST /v1/cards/{card_id}/<decision> (release or confirm): applied once
    per Idempotency-Key with the same answers as POST /v1/actions (201, 200 replayed, 409 in
    flight, 422 same key with another body), recorded with the token's name and the time."""

    async def post_decision(request: web.Request) -> web.Response:
        by = _writer(request)
        if isinstance(by, web.Response):
            return by
        key = idempotency_key(request)
        if isinstance(key, web.Response):
            return key
        card_id = request.match_info["card_id"]
        if not ID_RE.fullmatch(card_id):
            return error_reply(422, f"card_id: must be {ID_RULE}",
                               "card_id")
        raw = await _read_body(request)
        if isinstance(raw, web.Response):
            return raw
        try:
            asked = DecisionRequest.from_json(decision, card_id, raw)
        except DecisionError as exc:
            return error_reply(422, exc.reason, exc.field)
        metrics = request.app[METRICS]
        in_flight = request.app[IN_FLIGHT]
        flight_key = f"decision {card_id} {key}"  # never equal to an action key (32 hex)
        if flight_key in in_flight:
            metrics.child(metrics.conflicts, "in_flight").inc()
            return error_reply(409, "a request with this Idempotency-Key is in flight",
                               "Idempotency-Key")
        in_flight.add(flight_key)
        try:  # Redis errors and too few replicas are answered 503 by `observed`
            result = await request.app[STORE].decide(key, asked, by)
        finally:
            in_flight.discard(flight_key)
        if result.verdict == "mismatch":
            metrics.child(metrics.conflicts, "payload_mismatch").inc()
            return error_reply(422, "Idempotency-Key: already used on this card for a different "
                               "decision (decision, reason or txn_id differ)", "Idempotency-Key")
        body = result.render(key, asked)
        if result.verdict == "replay":
            metrics.child(metrics.replays, f"{decision}_card").inc()
            return json_reply(body, 200, {"Idempotent-Replayed": "true"})
        metrics.child(metrics.effects, f"{decision}_card", result.outcome).inc()
        logger.info("decision applied decision=%s card_ref=%s outcome=%s by=%s effect_id=%s",
                    decision, card_ref(card_id), result.outcome, by, result.effect_id)
        return json_reply(body, 201)

    return post_decision


async def list_reader(request: web.Request) -> web.Response:
    """GET /v1/lists for any token."""
    if _access(request) is None:
        return _unauthorized()
    return await get_lists(request)


def reader(handler):  # noqa: ANN001, ANN201 - an aiohttp handler
    """A GET for any token."""

    async def read(request: web.Request) -> web.Response:
        if _access(request) is None:
            return _unauthorized()
        return await handler(request)

    return read


def list_writer(handler):  # noqa: ANN001, ANN201 - an aiohttp handler
    """Writes of lists and rules: full-access tokens only, recorded by name."""

    async def write_list(request: web.Request) -> web.Response:
        by = _writer(request)
        if isinstance(by, web.Response):
            return by
        return await handler(request, by)

    return write_list


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves HTTP."""
    return json_reply({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: Redis answers PING within the configured timeout."""
    timeout = request.app[SETTINGS].action_redis_timeout_s
    try:
        await asyncio.wait_for(request.app[STORE].ping(), timeout)
    except (RedisError, TimeoutError, OSError) as exc:
        logger.warning("not ready: redis unreachable error=%s", type(exc).__name__)
        return json_reply(
            {"status": "unavailable", "error": "redis is unreachable"},
            503,
            {"Retry-After": str(RETRY_AFTER_S)},
        )
    return json_reply({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of this app's registry (the review queue's depth and age read
    from Redis first; Redis down: they keep their last values)."""
    from app.action_service.reviews import ReviewQueue

    service = request.app[METRICS]
    try:
        _, depth, oldest = await asyncio.wait_for(
            ReviewQueue(request.app[STORE]).open_reviews(1),
            request.app[SETTINGS].action_redis_timeout_s)
        service.review_queue(depth, oldest, time.time_ns() // 1_000_000)
    except (RedisError, TimeoutError, OSError) as exc:
        logger.warning("review queue not read for /metrics: %s", type(exc).__name__)
    return web.Response(
        body=request.app[METRICS].exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI 3 description of this service."""
    return json_reply(build_openapi())


def setup_routes(app: web.Application) -> None:
    """Mount every route (GET routes answer GET only, exactly as /openapi.json says), each
    counted and timed (see observe.py); then, for any other method on those paths, a 405
    with Allow, and for any other path a 404 (see `unmatched`)."""
    observer = app[METRICS]
    routes = (
        ("POST", "/v1/actions", post_action),
        ("GET", "/v1/actions/{idempotency_key}", get_action),
        ("GET", "/v1/cards/{card_id}", get_card),
        ("POST", "/v1/cards/{card_id}/release", decision_handler("release")),
        ("POST", "/v1/cards/{card_id}/confirm", decision_handler("confirm")),
        ("GET", "/v1/lists", list_reader),
        ("PUT", "/v1/lists/{kind}/{entity_id}", list_writer(put_entry)),
        ("DELETE", "/v1/lists/{kind}/{entity_id}", list_writer(delete_entry)),
        ("GET", "/v1/reviews", reader(get_reviews)),
        ("GET", "/v1/reviews/{review_id}", reader(get_review)),
        ("POST", "/v1/reviews/{review_id}/close", list_writer(close_review)),
        ("GET", "/v1/rules", reader(get_rules)),
        ("POST", "/v1/rules", list_writer(post_rule)),
        ("GET", "/v1/rules/{rule_id}", reader(get_rule)),
        ("PATCH", "/v1/rules/{rule_id}", list_writer(patch_rule)),
        ("GET", "/healthz", healthz),
        ("GET", "/readyz", readyz),
        ("GET", "/metrics", metrics),
        ("GET", "/openapi.json", openapi),
    )
    allowed: dict[str, list[str]] = {}
    for method, path, handler in routes:
        app.router.add_route(method, path, observed(observer, path, method, handler))
        allowed.setdefault(path, []).append(method)
    for path, methods in allowed.items():  # after each path's last method (aiohttp's order)
        app.router.add_route(hdrs.METH_ANY, path, unmatched(observer, ", ".join(methods)))
    app.router.add_route(hdrs.METH_ANY, r"/{path:[\s\S]*}", unmatched(observer, None))
