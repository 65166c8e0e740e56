"""The delivery client: POSTs actions to the action service, retrying until they land."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Protocol, Self

import aiohttp
from prometheus_client import Counter

from app.actions.action import Action
from app.actions.retry import RetryPolicy, parse_retry_after
from app.security.tokens import client_token
from app.settings import Settings

logger = logging.getLogger(__name__)

#: Rejected bodies are kept for the DLQ, truncated to this many characters.
MAX_REJECTED_BODY: Final = 2048

DELIVERED = Counter(
    "fraudstream_dispatch_delivered_total", "Actions accepted by the action service.", ["type"]
)
REPLAYED = Counter(
    "fraudstream_dispatch_replayed_total",
    "Deliveries the service answered as a replay (200, Idempotent-Replayed).",
    ["type"],
)
RETRIES = Counter(
    "fraudstream_dispatch_retries_total",
    "Failed attempts that were retried, by reason (HTTP status, connection, timeout).",
    ["reason"],
)
REJECTED = Counter(
    "fraudstream_dispatch_rejected_total", "Actions permanently refused (4xx).", ["status"]
)


@dataclass(frozen=True, slots=True)
class Delivered:
    """The service accepted the action: 201 (applied now) or 200 (applied before)."""

    status: int
    replayed: bool
    attempts: int


@dataclass(frozen=True, slots=True)
class Rejected:
    """The service refused the action for good (a 4xx other than 408/409/425/429)."""

    status: int
    body: str
    attempts: int


DeliveryResult = Delivered | Rejected


class SessionFactory(Protocol):
    """Builds the one HTTP client session the deliverer owns (injectable for tests)."""

    def __call__(self) -> aiohttp.ClientSession: ...


@dataclass(frozen=True, slots=True)
class _Retry:
    reason: str
    retry_after_s: float | None


class ActionDeliverer:
    """Async context manager owning one keep-alive session; delivers actions at most
    `settings.dispatch_concurrency` at a time and retries transient failures forever."""

    def __init__(
        self,
        settings: Settings,
        *,
        session_factory: SessionFactory | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rng: random.Random | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        if settings.dispatch_concurrency < 1:
            raise ValueError("dispatch_concurrency must be >= 1")
        self._url = settings.action_service_url.rstrip("/") + "/v1/actions"
        self._authorization = f"Bearer {client_token(settings)}"
        self._concurrency = settings.dispatch_concurrency
        self._timeout = aiohttp.ClientTimeout(total=settings.dispatch_request_timeout_s)
        self._policy = policy or RetryPolicy(
            settings.dispatch_backoff_base_s, settings.dispatch_backoff_cap_s
        )
        self._session_factory = session_factory or self._default_session
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._slots = asyncio.Semaphore(settings.dispatch_concurrency)
        self._session: aiohttp.ClientSession | None = None

    def _default_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=self._concurrency, keepalive_timeout=30)
        return aiohttp.ClientSession(connector=connector, timeout=self._timeout)

    async def __aenter__(self) -> Self:
        self._session = self._session_factory()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def deliver(self, action: Action) -> DeliveryResult:
        """POST one action until it is accepted (Delivered) or refused for good (Rejected).

        409, 408, 425, 429, 5xx, connection errors and timeouts are retried with
        exponential backoff and full jitter, without limit: the caller stops pulling new
        work meanwhile and nothing is lost. Cancel the task to stop.
        """
        body = action.to_json()
        headers = {
            "Authorization": self._authorization,
            "Idempotency-Key": action.idempotency_key,
            "Content-Type": "application/json",
        }
        attempt = 0
        while True:
            async with self._slots:
                outcome = await self._attempt(body, headers, attempt + 1)
            if isinstance(outcome, Delivered):
                DELIVERED.labels(action.type).inc()
                if outcome.replayed:
                    REPLAYED.labels(action.type).inc()
                return outcome
            if isinstance(outcome, Rejected):
                REJECTED.labels(str(outcome.status)).inc()
                logger.warning(
                    "action rejected key=%s type=%s status=%d attempts=%d",
                    action.idempotency_key,
                    action.type,
                    outcome.status,
                    outcome.attempts,
                )
                return outcome
            RETRIES.labels(outcome.reason).inc()
            wait = self._policy.delay(attempt, self._rng, outcome.retry_after_s)
            if attempt & (attempt + 1) == 0:  # attempts 1, 2, 4, 8, ...: no log flood in outages
                logger.warning(
                    "action delivery failed key=%s reason=%s attempt=%d retry_in_s=%.3f",
                    action.idempotency_key,
                    outcome.reason,
                    attempt + 1,
                    wait,
                )
            await self._sleep(wait)
            attempt += 1

    async def deliver_many(self, actions: Iterable[Action]) -> list[DeliveryResult]:
        """Deliver concurrently (within the bound); results are in input order."""
        return list(await asyncio.gather(*(self.deliver(a) for a in actions)))

    async def _attempt(
        self, body: bytes, headers: dict[str, str], attempts: int
    ) -> Delivered | Rejected | _Retry:
        if self._session is None:
            raise RuntimeError("ActionDeliverer used outside `async with`")
        try:
            async with self._session.post(
                self._url, data=body, headers=headers, timeout=self._timeout
            ) as response:
                payload = await response.read()
                status = response.status
                replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
        except TimeoutError:
            return _Retry("timeout", None)
        except aiohttp.ClientError:
            return _Retry("connection", None)
        verdict = RetryPolicy.classify(status)
        if verdict == "delivered":
            return Delivered(status, replayed or status == 200, attempts)
        if verdict == "retry":
            return _Retry(str(status), retry_after)
        text = payload.decode("utf-8", "replace")[:MAX_REJECTED_BODY]
        return Rejected(status, text, attempts)
