"""Idempotency keys and payload fingerprints: what makes two actions the same action."""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Final, Literal

import orjson

if TYPE_CHECKING:
    from app.actions.action import Action

ActionType = Literal["freeze_card", "alert_customer", "review"]
ACTION_TYPES: Final[tuple[ActionType, ...]] = ("freeze_card", "alert_customer", "review")

#: Bumping a version changes every key/fingerprint; only do it together with a key-space flush.
KEY_SCHEME: Final = "fraudstream.action-key.v1"
FINGERPRINT_SCHEME: Final = "fraudstream.action-fingerprint.v1"

KEY_HEX_CHARS: Final = 32
KEY_RE: Final = re.compile(r"[0-9a-f]{32}")


def idempotency_key(action_type: str, txn_id: str) -> str:
    """The action's idempotency key: 32 hex chars of sha256 over (scheme, type, txn_id).

    Only the action type and the transaction id enter the key, so the same transaction
    replayed any number of times, by any worker, under any model version and at any time
    yields the same key. The input is a JSON array, which is unambiguous for any strings
    (no separator can be forged), and it carries a scheme version. 128 bits make an
    accidental collision negligible for any realistic number of transactions.
    """
    encoded = orjson.dumps([KEY_SCHEME, action_type, txn_id])
    return hashlib.sha256(encoded).hexdigest()[:KEY_HEX_CHARS]


def action_fingerprint(action: Action) -> str:
    """Fingerprint of an action's identity, used to tell a replay from a key reuse.

    It covers the key, type, card_id, txn_id and ts_ms, and deliberately NOT score,
    model_version or decided_at_ms: a replay scored by a newer model or decided later is
    the same action and must be answered as a replay (200), not as a conflict (422).
    """
    encoded = orjson.dumps(
        [
            FINGERPRINT_SCHEME,
            action.idempotency_key,
            action.type,
            action.card_id,
            action.txn_id,
            action.ts_ms,
        ]
    )
    return hashlib.sha256(encoded).hexdigest()
