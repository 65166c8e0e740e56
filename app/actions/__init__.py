"""Actions: the Action record, idempotency keys, the retry policy and the delivery client."""

from app.actions.action import Action, ActionError, make_action
from app.actions.key import ACTION_TYPES, ActionType, action_fingerprint, idempotency_key

__all__ = [
    "ACTION_TYPES",
    "Action",
    "ActionError",
    "ActionType",
    "action_fingerprint",
    "idempotency_key",
    "make_action",
]
