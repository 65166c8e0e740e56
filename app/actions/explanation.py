"""An action's explanation: its top contributing features (see app.scoring.explain), typed and
checked where actions are parsed."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

#: At most this many features in one explanation (the worker sends app.scoring.explain.TOP).
MAX_FEATURES: Final = 20
_NAME_RE: Final = re.compile(r"[a-z0-9_]{1,64}")


class ExplanationError(ValueError):
    """An explanation that is not a list of {name, value, contribution}."""


@dataclass(frozen=True, slots=True)
class Contribution:
    """One feature of an explanation: its value and how much it moved the score."""

    name: str
    value: float | int
    contribution: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "contribution": self.contribution}


def parse_explanation(obj: Any) -> tuple[Contribution, ...]:
    """A decoded `explanation` value; ExplanationError saying what is wrong."""
    if not isinstance(obj, list) or not 1 <= len(obj) <= MAX_FEATURES:
        raise ExplanationError(f"must be a list of 1..{MAX_FEATURES} objects")
    out = []
    for item in obj:
        if not isinstance(item, dict) or item.keys() != {"name", "value", "contribution"}:
            raise ExplanationError("each item must be exactly {name, value, contribution}")
        name, value, contribution = item["name"], item["value"], item["contribution"]
        _check(name, value, contribution)
        out.append(Contribution(name, value, float(contribution)))
    return tuple(out)


def checked_explanation(items: Sequence[Contribution]) -> tuple[Contribution, ...]:
    """Contributions built in this process (app.scoring.explain), held to the rules
    `parse_explanation` holds a decoded one to, without a round trip through dicts."""
    if not 1 <= len(items) <= MAX_FEATURES:
        raise ExplanationError(f"must be a list of 1..{MAX_FEATURES} objects")
    for item in items:
        if type(item) is not Contribution or type(item.contribution) is not float:
            raise ExplanationError("each item must be a Contribution with a float contribution")
        _check(item.name, item.value, item.contribution)
    return tuple(items)


def _check(name: Any, value: Any, contribution: Any) -> None:
    if type(name) is not str or not _NAME_RE.fullmatch(name):
        raise ExplanationError("name: must be 1..64 characters of [a-z0-9_]")
    if not _finite(value):
        raise ExplanationError("value: must be a finite number")
    if not _finite(contribution):
        raise ExplanationError("contribution: must be a finite number")


def _finite(number: Any) -> bool:
    """An int or a finite float (a bool is neither)."""
    kind = type(number)
    return kind is int or (kind is float and math.isfinite(number))
