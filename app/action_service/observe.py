"""Per-route observation of the action service: count, time, and the JSON shape of every error.

Each route's handler is wrapped once, when it is mounted, with its route template and method
bound, so a request pays for no middleware chain, no route lookup and no label resolution: one
dict lookup finds the status's counter. Requests no route matches are answered by `unmatched`
handlers mounted for any method after the real ones (a 405 with Allow on a known path, a 404
elsewhere) in the same JSON error shape as aiohttp's own 404/405 would have, so the app needs
no middleware at all (aiohttp then skips building a middleware chain per request).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web
from redis.exceptions import ClusterError, ReadOnlyError, ResponseError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError as RedisOutOfMemoryError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.action_service.apply_script import NotReplicatedError
from app.action_service.metrics import ServiceMetrics
from app.action_service.replies import error_reply, unavailable_reply

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Route label of requests no route matched.
UNMATCHED: Final = "unmatched"
#: Methods counted under their own label; anything else is counted as OTHER.
_METHODS: Final = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))


async def _answer(request: web.Request, handler: Handler, route: str,
                  metrics: ServiceMetrics) -> web.StreamResponse:
    """The handler's response, or the JSON error reply for what it raised."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        return error_reply(exc.status, exc.reason, None, headers)
    except NotReplicatedError as exc:
        metrics.redis_unavailable.inc()
        logger.warning("write not acknowledged by replicas route=%s acked=%d wanted=%d", route,
                       exc.acked, exc.wanted)
        return unavailable_reply(str(exc))
    except (RedisConnectionError, RedisTimeoutError, RedisOutOfMemoryError, ClusterError,
            ReadOnlyError, SlotNotCoveredError) as exc:
        metrics.redis_unavailable.inc()
        logger.warning("redis unavailable route=%s error=%s", route, type(exc).__name__)
        return unavailable_reply()
    except ResponseError as exc:
        if _in_failover(exc):
            metrics.redis_unavailable.inc()
            logger.warning("redis cluster in failover route=%s error=%s", route,
                           type(exc).__name__)
            return unavailable_reply()
        logger.exception("unhandled error route=%s method=%s", route, request.method)
        return error_reply(500, "internal error", None)
    except Exception:
        logger.exception("unhandled error route=%s method=%s", route, request.method)
        return error_reply(500, "internal error", None)


def _in_failover(exc: ResponseError) -> bool:
    """A cluster error reply that a failover explains (the slot moved, its master is down or
    demoted): worth a retry, not a 500."""
    return str(exc).split(" ", 1)[0] in ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN",
                                         "MASTERDOWN", "READONLY")


def observed(metrics: ServiceMetrics, route: str, method: str, handler: Handler) -> Handler:
    """`handler` for `method` on `route`, counted and timed, its exceptions answered as JSON."""
    latency = metrics.child(metrics.latency, route, method)
    counters = metrics.status_counters(route, method)
    debug = logger.isEnabledFor(logging.DEBUG)

    async def observe(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        response = await _answer(request, handler, route, metrics)
        elapsed = time.perf_counter() - started
        counters(response.status).inc()
        latency.observe(elapsed)
        if debug:
            logger.debug("request route=%s method=%s status=%d ms=%.2f", route, method,
                         response.status, elapsed * 1000)
        return response

    observe.__doc__ = handler.__doc__
    return observe


def unmatched(metrics: ServiceMetrics, allow: str | None) -> Handler:
    """A handler for requests no route answers: 405 with `Allow: allow` (a known path), or 404
    (`allow` None), as aiohttp's router would, in the JSON error shape and counted."""
    status, reason = (405, "Method Not Allowed") if allow else (404, "Not Found")
    headers = {"Allow": allow} if allow else None

    async def answer(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        method = request.method if request.method in _METHODS else "OTHER"
        response = error_reply(status, reason, None, headers)
        metrics.child(metrics.requests, UNMATCHED, method, str(status)).inc()
        metrics.child(metrics.latency, UNMATCHED, method).observe(time.perf_counter() - started)
        return response

    answer.__doc__ = f"Answers {status} {reason} (no route for this request)."
    return answer
