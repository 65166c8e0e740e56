"""The dispatcher's retry policy: which answers to retry and how long to wait (pure, no I/O)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final, Literal

Verdict = Literal["delivered", "retry", "reject"]

#: 4xx answers that say "not now" rather than "never": retried like 5xx.
RETRYABLE_4XX: Final = frozenset({408, 409, 425, 429})
#: Exponents above this cannot change the result (2**40 * any sane base > any sane cap).
_MAX_EXPONENT: Final = 40


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: attempt n waits uniform(0, min(cap, base * 2**n)).

    `n` counts the failed attempts so far, starting at 0. A server's Retry-After (seconds)
    raises the wait to at least that much, still bounded by `cap_s`.
    """

    base_s: float = 0.05
    cap_s: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.base_s <= self.cap_s:
            raise ValueError(
                f"need 0 < base_s <= cap_s, got base_s={self.base_s} cap_s={self.cap_s}"
            )

    def ceiling(self, attempt: int) -> float:
        """The largest wait after `attempt` failed attempts."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        return min(self.cap_s, self.base_s * 2 ** min(attempt, _MAX_EXPONENT))

    def delay(self, attempt: int, rng: random.Random, retry_after_s: float | None = None) -> float:
        """Seconds to wait before the next attempt (full jitter, Retry-After honoured)."""
        wait = rng.uniform(0.0, self.ceiling(attempt))
        if retry_after_s is not None and retry_after_s > 0:
            wait = max(wait, min(retry_after_s, self.cap_s))
        return wait

    @staticmethod
    def classify(status: int) -> Verdict:
        """What a response status means for one delivery: done, try again, or give up."""
        if status in (200, 201):
            return "delivered"
        if status >= 500 or status in RETRYABLE_4XX:
            return "retry"
        return "reject"


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds when given as a number (HTTP-date forms are ignored)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
