"""HTTP handlers of the rules: GET /v1/rules, GET /v1/rules/{id}, POST /v1/rules, PATCH
/v1/rules/{id}.

Rules live on the compacted control topic (app.control), one record per version: a write
reads the topic, makes the next version (immutable: its author, time and content) and is
answered once Kafka has acknowledged it; every worker applies it from that offset on. A rule
that does not parse or type-check is a 422 naming the rule, the field and, for the
expression, the line and column; nothing is written. Writes of one service are serialized
(the version number is read, then written); Kafka down or slow: 503, nothing written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final, Protocol

import orjson
from aiohttp import web

from app.action_service.replies import RETRY_AFTER_S, error_reply, json_reply
from app.control.fold import ControlFold
from app.rules.rule import RULE_ID_RE, Rule, RuleError, check_request

logger = logging.getLogger(__name__)

#: Largest rule request body (an expression of at most 2,000 characters and the rest).
MAX_RULE_BODY_BYTES: Final = 8 * 1024
#: The order a new rule gets after the last one when none is given (at most MAX_ORDER).
ORDER_STEP: Final = 10
MAX_ORDER: Final = 1_000_000


class RuleBook(Protocol):
    """Where rule versions are written and read (app.control.publisher.ControlPublisher)."""

    async def put_rule(self, rule: Rule) -> int: ...

    async def state(self) -> ControlFold: ...

    async def aclose(self) -> None: ...


RULES = web.AppKey("rules", RuleBook)
RULES_LOCK = web.AppKey("rules_lock", asyncio.Lock)


def _kafka_errors() -> tuple[type[BaseException], ...]:
    from aiokafka.errors import KafkaError

    return (KafkaError, TimeoutError, OSError)


def _kafka_down(exc: BaseException) -> web.Response:
    logger.warning("rule request not done: Kafka error=%s", type(exc).__name__)
    return error_reply(503, "Kafka did not acknowledge in time; nothing was written, retry",
                       None, {"Retry-After": str(RETRY_AFTER_S)})


def _refused(exc: RuleError) -> web.Response:
    return json_reply(exc.to_dict(), status=422)


async def _body(request: web.Request) -> dict[str, Any] | web.Response:
    if request.content_length is not None and request.content_length > MAX_RULE_BODY_BYTES:
        return error_reply(413, f"body is over {MAX_RULE_BODY_BYTES} bytes", None)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return error_reply(413, f"body is over {MAX_RULE_BODY_BYTES} bytes", None)
    if len(raw) > MAX_RULE_BODY_BYTES:
        return error_reply(413, f"body is over {MAX_RULE_BODY_BYTES} bytes", None)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return error_reply(422, "body: not valid JSON", None)
    if not isinstance(body, dict):
        return error_reply(422, "body: must be a JSON object", None)
    return body


async def get_rules(request: web.Request) -> web.Response:
    """Every rule's current version (disabled ones too), in evaluation order."""
    try:
        state = await request.app[RULES].state()
    except _kafka_errors() as exc:
        return _kafka_down(exc)
    current = sorted(state.rules().current.values(), key=lambda r: (r.order, r.id))
    return json_reply({"rules": [r.to_dict() for r in current]})


async def get_rule(request: web.Request) -> web.Response:
    """One rule: its current version and every version before it."""
    rule_id = request.match_info["rule_id"]
    if not RULE_ID_RE.fullmatch(rule_id):
        return error_reply(422, "id: 1..64 characters of [a-z0-9_-]", "id")
    try:
        state = await request.app[RULES].state()
    except _kafka_errors() as exc:
        return _kafka_down(exc)
    history = state.history(rule_id)
    if not history:
        return error_reply(404, f"no rule {rule_id}", "id")
    return json_reply({"rule": history[-1].to_dict(),
                       "history": [r.to_dict() for r in history]})


async def post_rule(request: web.Request, by: str) -> web.Response:
    """A new rule, version 1 (409 when the id exists: edit it instead)."""
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    try:
        fields = check_request(body, partial=False)
    except RuleError as exc:
        return _refused(exc)
    async with request.app[RULES_LOCK]:
        try:
            state = await request.app[RULES].state()
            if state.history(fields["id"]):
                return error_reply(409, f"rule {fields['id']} exists: PATCH /v1/rules/"
                                        f"{fields['id']} writes its next version", "id")
            orders = [r.order for r in state.rules().current.values()]
            fields.setdefault("order", min(MAX_ORDER, (max(orders) if orders else 0)
                                           + ORDER_STEP))
            rule = Rule(version=1, author=by, at_ms=time.time_ns() // 1_000_000, **fields)
            offset = await request.app[RULES].put_rule(rule)
        except _kafka_errors() as exc:
            return _kafka_down(exc)
    logger.info("rule %s written by=%s offset=%d", rule.name, by, offset)
    return json_reply({**rule.to_dict(), "control_offset": offset}, status=201)


async def patch_rule(request: web.Request, by: str) -> web.Response:
    """The rule's next version: the current one with the body's fields replaced."""
    rule_id = request.match_info["rule_id"]
    if not RULE_ID_RE.fullmatch(rule_id):
        return error_reply(422, "id: 1..64 characters of [a-z0-9_-]", "id")
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    if body.get("id", rule_id) != rule_id:
        return error_reply(422, "id: cannot be changed (a new rule is a POST)", "id")
    body.pop("id", None)
    if not body:
        return error_reply(422, "body: nothing to change", None)
    try:
        fields = check_request({"id": rule_id, **body}, partial=True)
    except RuleError as exc:
        return _refused(exc)
    async with request.app[RULES_LOCK]:
        try:
            state = await request.app[RULES].state()
            history = state.history(rule_id)
            if not history:
                return error_reply(404, f"no rule {rule_id}", "id")
            current = history[-1]
            values = {**current.to_dict(), **fields, "version": current.version + 1,
                      "author": by, "at_ms": time.time_ns() // 1_000_000}
            rule = Rule(**values)
            offset = await request.app[RULES].put_rule(rule)
        except _kafka_errors() as exc:
            return _kafka_down(exc)
    logger.info("rule %s written by=%s offset=%d", rule.name, by, offset)
    return json_reply({**rule.to_dict(), "control_offset": offset})
