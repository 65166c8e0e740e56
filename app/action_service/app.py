"""The action service's aiohttp application: factory, typed app keys, Redis lifecycle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from aiohttp import web
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff

from app.action_service.appkeys import IN_FLIGHT, METRICS, REDIS, SETTINGS, STORE, TOKENS
from app.action_service.label_outbox import forward_to_kafka
from app.action_service.list_routes import LISTS, ListBook
from app.action_service.metrics import ServiceMetrics
from app.action_service.routes import MAX_BODY_BYTES, setup_routes
from app.action_service.rule_routes import RULES, RULES_LOCK, RuleBook
from app.action_service.store import ActionStore
from app.redis_url import is_cluster_url, node_url
from app.security.redis import redis_connection_kwargs
from app.security.tokens import TokenSet, service_tokens
from app.settings import Settings

logger = logging.getLogger(__name__)

#: How long the service's shutdown waits for the label forwarder once cancelled.
FORWARDER_STOP_S = 5.0


async def stop_task(task: asyncio.Task[None], timeout_s: float) -> bool:
    """Cancel `task` and wait for it up to `timeout_s`; False (logged) if it is still running.

    A guard: a task that swallows its cancellation (3.11's `asyncio.wait_for` did, as the
    awaited call completed; `start_or_close` now honours it) would otherwise hold the
    shutdown, and the Redis client closed after it, for ever.
    """
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        logger.warning("task %s did not stop within %.1f s of its cancellation; left behind",
                       task.get_name(), timeout_s)
        return False
    if not task.cancelled() and task.exception() is not None:
        logger.warning("task %s ended with %r", task.get_name(), task.exception())
    return True


class RedisClientFactory(Protocol):
    """Builds the service's Redis client from settings (tests inject their own)."""

    def __call__(self, settings: Settings) -> Redis | RedisCluster: ...


def default_redis_client(settings: Settings) -> Redis | RedisCluster:
    """A pooled client for settings.effective_redis_url; connects lazily, on first command.

    A `redis+cluster://` URL gives redis-py's `RedisCluster` (reads; the slot map of the
    cluster batcher), with up to `action_redis_max_connections` connections per node.

    The pool blocks (up to the timeout) instead of failing when every connection is busy,
    so a burst queues rather than turning into 503s. One quick retry covers a pooled
    connection that died with a Redis restart (reads only: the apply batcher's dedicated
    connections are built from this pool's options but send each script call once).
    """
    timeout = settings.action_redis_timeout_s
    if is_cluster_url(settings.effective_redis_url):
        return RedisCluster.from_url(
            node_url(settings.effective_redis_url),
            **redis_connection_kwargs(settings),
            max_connections=settings.action_redis_max_connections,
            decode_responses=True,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(ExponentialBackoff(cap=0.1, base=0.01), 1),
        )
    pool = BlockingConnectionPool.from_url(
        settings.effective_redis_url,
        **redis_connection_kwargs(settings),
        max_connections=settings.action_redis_max_connections,
        timeout=timeout,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(ExponentialBackoff(cap=0.1, base=0.01), 1),
        health_check_interval=30,
    )
    return Redis.from_pool(pool)  # the client owns the pool: aclose() disconnects it


def node_client_factory(settings: Settings) -> Callable[[str, int], Redis]:
    """Plain clients of single cluster masters, configured like the service's client, for the
    cluster batcher's script calls and WAIT. No retry: a failed call answers 503 at once and
    the client's retry (same key) finds the record or applies it once."""
    timeout = settings.action_redis_timeout_s
    scheme = node_url(settings.effective_redis_url).split("://", 1)[0]

    def build(host: str, port: int) -> Redis:
        return Redis.from_url(f"{scheme}://{host}:{port}", **redis_connection_kwargs(settings),
                              decode_responses=True, socket_timeout=timeout,
                              socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))

    return build


def create_app(
    settings: Settings,
    redis_client_factory: RedisClientFactory | None = None,
    *,
    tokens: TokenSet | None = None,
    forward_labels: bool = False,
    lists: ListBook | None = None,
    rules: RuleBook | None = None,
) -> web.Application:
    """Build the action service: routes, metrics, and a Redis client owned by cleanup_ctx.

    `tokens` defaults to those of a loopback-bound service (`service_tokens(settings)`); the
    CLI passes the set checked against the address it binds. `forward_labels` runs the label
    outbox forwarder (a Kafka producer) as a task of the app when FRAUDSTREAM_LABELS_FORWARD is
    on too: the CLI's service does, apps built in-process (tests, benchmarks) do not.
    `lists` is where the allow/block lists are read and written and `rules` where the rules
    are (default for both: one publisher of the control topic, its producer started on the
    first write).
    """
    tokens = tokens or service_tokens(settings)
    if not 0 <= settings.idempotency_margin_s < settings.idempotency_ttl_s:
        raise ValueError(
            "need 0 <= FRAUDSTREAM_IDEMPOTENCY_MARGIN_S < FRAUDSTREAM_IDEMPOTENCY_TTL_S, got "
            f"{settings.idempotency_margin_s} and {settings.idempotency_ttl_s}"
        )
    if settings.effective_redis_wait_replicas and (
            settings.redis_wait_timeout_ms >= settings.action_redis_timeout_s * 1000):
        raise ValueError(
            "need FRAUDSTREAM_REDIS_WAIT_TIMEOUT_MS below FRAUDSTREAM_ACTION_REDIS_TIMEOUT_S "
            f"(WAIT would outlive the connection's timeout), got {settings.redis_wait_timeout_ms}"
            f" ms and {settings.action_redis_timeout_s} s")
    # Each route is wrapped once when mounted (see observe.py), so a request pays for no route
    # or label lookup; 404/405 come from catch-all routes, so there is no middleware to run.
    metrics = ServiceMetrics()
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[SETTINGS] = settings
    app[TOKENS] = tokens
    app[METRICS] = metrics
    app[IN_FLIGHT] = set()
    from app.control.publisher import ControlPublisher

    control = ControlPublisher(settings)
    app[LISTS] = lists if lists is not None else control
    app[RULES] = rules if rules is not None else control
    app[RULES_LOCK] = asyncio.Lock()
    factory = redis_client_factory or default_redis_client

    async def redis_context(app: web.Application) -> AsyncIterator[None]:
        client = factory(settings)
        app[REDIS] = client
        app[STORE] = ActionStore(
            client,
            ttl_ms=settings.idempotency_ttl_s * 1000,
            margin_ms=settings.idempotency_margin_s * 1000,
            alerts_per_card=settings.action_alerts_per_card,
            apply_connections=settings.action_apply_connections,
            apply_max_batch=settings.action_apply_max_batch,
            observer=app[METRICS],
            wait_replicas=settings.effective_redis_wait_replicas,
            wait_timeout_ms=settings.redis_wait_timeout_ms,
            node_client=node_client_factory(settings),
        )
        logger.info(
            "action service ready ttl_s=%d margin_s=%d tokens=%d read_tokens=%d dev_token=%s",
            settings.idempotency_ttl_s,
            settings.idempotency_margin_s,
            len(tokens.write),
            len(tokens.read),
            tokens.dev,
        )
        forwarder = (asyncio.create_task(forward_to_kafka(settings, client), name="labels")
                     if forward_labels and settings.labels_forward else None)
        try:
            yield
        finally:
            if forwarder is not None:
                await stop_task(forwarder, FORWARDER_STOP_S)
            await app[STORE].aclose()
            await app[LISTS].aclose()
            await app[RULES].aclose()
            await client.aclose()
            logger.info("action service stopped; redis client closed")

    app.cleanup_ctx.append(redis_context)
    setup_routes(app)
    return app
