"""JSON replies of the action service: bodies, the error shape and the 503 for Redis outages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
from aiohttp import web

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
