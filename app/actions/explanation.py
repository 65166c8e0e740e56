"""An action's explanation: its top contributing features (see app.scoring.explain), typed and
checked where actions are parsed."""

from __future__ import annotations

import math
import re
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
        if type(name) is not str or not _NAME_RE.fullmatch(name):
            raise ExplanationError("name: must be 1..64 characters of [a-z0-9_]")
        for what, number in (("value", value), ("contribution", contribution)):
            if type(number) not in (int, float) or (type(number) is float
                                                    and not math.isfinite(number)):
                raise ExplanationError(f"{what}: must be a finite number")
        out.append(Contribution(name, value, float(contribution)))
    return tuple(out)
