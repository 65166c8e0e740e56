"""Names of the action service's Redis keys: the one place that knows the key layout."""

from __future__ import annotations

from typing import Final

#: Stream with one entry per key answered 201: the ledger that proves "exactly once".
EFFECTS_STREAM: Final = "effects"
#: Stream of queued customer alerts, for a notifier to consume.
ALERTS_STREAM: Final = "alerts"
#: Hash of durable counters; field `replays` counts redeliveries absorbed (answered 200 replayed).
STATS_KEY: Final = "stats"


def idem_key(key: str) -> str:
    """Redis hash holding an idempotency key's record (expires after the key TTL)."""
    return f"idem:{key}"


def card_key(card_id: str) -> str:
    """Redis hash holding a card's status (status, frozen_at_ms, reason, ...)."""
    return f"card:{card_id}"


def card_alerts_key(card_id: str) -> str:
    """Redis list of a card's newest alerts (JSON objects), oldest first."""
    return f"card:{card_id}:alerts"
