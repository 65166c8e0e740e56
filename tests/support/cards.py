"""What the action service shows for a card: the view of one it has never seen."""

from __future__ import annotations

from typing import Any


def unknown_card_view(card_id: str) -> dict[str, Any]:
    """GET /v1/cards/{card_id} of a card with no decision and no alert: active, all empty."""
    return {
        "card_id": card_id,
        "status": "active",
        "frozen_at_ms": None,
        "reason": None,
        "txn_id": None,
        "explanation": None,
        "decided_by": None,
        "rule": None,
        "released_at_ms": None,
        "released_by": None,
        "confirmed_fraud": False,
        "alerts_total": 0,
        "alerts": [],
        "history": [],
    }
