"""The base of the validators' errors: a leaf module below every package (imports nothing of app)."""

from __future__ import annotations


class FieldError(ValueError):
    """Input that is not acceptable because of one field: `field` names the culprit (None: the
    whole input), `reason` says why and is the message."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason
