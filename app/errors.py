"""The base of the validators' errors: a leaf module below every package (imports nothing of app)."""

from __future__ import annotations

from typing import Literal

#: Why a JSON document broke a contract, field by field: the codes every contract shares.
FieldErrorCode = Literal[
    "invalid_json",
    "not_object",
    "missing_field",
    "unknown_field",
    "wrong_type",
    "out_of_range",
    "bad_format",
]


class FieldError(ValueError):
    """Input that is not acceptable because of one field: `field` names the culprit (None: the
    whole input), `reason` says why and is the message."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason
