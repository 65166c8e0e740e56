"""JSON replies of the action service: bodies, the error shape and the 503 for Redis outages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
from aiohttp import web

from app.ids import ID_RE, ID_RULE

#: Seconds a client should wait before retrying a 503.
RETRY_AFTER_S: Final = 1


def json_reply(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A JSON response serialized with orjson."""
    return web.Response(
        body=orjson.dumps(body), status=status, headers=headers, content_type="application/json"
    )


def error_reply(
    status: int, error: str, field: str | None = None, headers: Mapping[str, str] | None = None
) -> web.Response:
    """The one error shape: {"error": <readable reason>, "field": <offending field or null>}."""
    return json_reply({"error": error, "field": field}, status=status, headers=headers)


def unavailable_reply(error: str = "redis is unreachable; retry with the same key") -> web.Response:
    """503 with Retry-After: retrying is safe, the key makes any repeat a replay."""
    return error_reply(503, error, None, {"Retry-After": str(RETRY_AFTER_S)})


def idempotency_key(request: web.Request) -> str | web.Response:
    """The request's Idempotency-Key header, or the reply refusing it: 400 without one, 422
    when it is not an id."""
    key = request.headers.get("Idempotency-Key", "")
    if not key:
        return error_reply(400, "the Idempotency-Key header is required", "Idempotency-Key")
    if not ID_RE.fullmatch(key):
        return error_reply(422, f"Idempotency-Key: must be {ID_RULE}", "Idempotency-Key")
    return key
