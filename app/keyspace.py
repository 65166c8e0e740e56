"""The action service's Redis keyspace by prefix: a leaf below the service, which writes the keys
(app.action_service.redis_keys), and the stack, whose ACLs grant them (app.stack.secure)."""

from __future__ import annotations

from typing import Final

#: The prefix of every key the action service writes, in the order redis_keys documents them.
KEY_PREFIXES: Final = ("idem", "card", "effects", "alerts", "stats", "claim", "labels", "reviews",
                       "reviews_open", "review")
#: Key patterns of every key the service writes (for ACLs).
KEY_PATTERNS: Final = tuple(f"{prefix}:*" for prefix in KEY_PREFIXES)
