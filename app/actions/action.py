"""The Action record (topic `actions`, POST /v1/actions body) and its strict parser."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from app.actions.explanation import (
    Contribution,
    ExplanationError,
    checked_explanation,
    parse_explanation,
)
from app.actions.key import ACTION_TYPES, KEY_RE, ActionType, idempotency_key
from app.errors import FieldError, FieldErrorCode
from app.ids import ID_PATTERN, ID_RE, ID_RULE
from app.transactions.contract import MIN_TS_MS

#: 2100-01-01T00:00:00Z: a generous upper bound that keeps every ms timestamp exact in a
#: double (Redis Lua numbers) and rejects obviously wrong units (µs, ns).
MAX_TS_MS: Final = 4_102_444_800_000
_MODEL_VERSION_RE: Final = re.compile(r"[\x20-\x7e]{1,128}")
#: Who decided an action: the model's score and policy, an allow/block list entry that
#: overrode them (app.scoring.lists), or a rule (app.rules).
DecidedBy = Literal["model", "allow_list", "block_list", "rule"]
DECIDED_BY: Final[tuple[DecidedBy, ...]] = ("model", "allow_list", "block_list", "rule")
#: How an action names the list entry that decided it: "<list>:<kind>:<id>".
RULE_RE: Final = re.compile(f"(allow|block):(card|merchant):{ID_PATTERN}")
#: How an action names the rule version that decided it: "<rule id>@<version>".
RULE_VERSION_RE: Final = re.compile(r"[a-z0-9][a-z0-9_\-]{0,63}@[1-9][0-9]{0,8}")

ActionErrorCode = Literal[FieldErrorCode, "key_mismatch"]


class ActionError(FieldError):
    """An action broke the contract: a stable `code`, the offending `field` and a `reason`."""

    def __init__(self, code: ActionErrorCode, field: str | None, reason: str) -> None:
        super().__init__(field, reason)
        self.code: ActionErrorCode = code


@dataclass(frozen=True, slots=True)
class Action:
    """One decided action, exactly the actions contract (docs/contract.md), plus an optional
    `explanation` (its top contributing features, app.scoring.explain), who decided it
    (`decided_by`: the model, or an allow/block list entry named by `rule`). None of these is
    part of the action's identity (key, fingerprint): a replay with or without them, or decided
    by a list that changed meanwhile, is the same action."""

    idempotency_key: str
    type: ActionType
    card_id: str
    txn_id: str
    ts_ms: int
    score: float
    model_version: str
    decided_at_ms: int
    explanation: tuple[Contribution, ...] | None = None
    decided_by: DecidedBy = "model"
    rule: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict in contract field order (JSON-ready), then `decided_by`; `explanation` and
        `rule` only when present."""
        out = {name: getattr(self, name) for name in FIELDS}
        if self.explanation is not None:
            out["explanation"] = [c.to_dict() for c in self.explanation]
        out["decided_by"] = self.decided_by
        if self.rule is not None:
            out["rule"] = self.rule
        return out

    def explanation_json(self) -> str:
        """The explanation as a JSON string ('' when absent), as the action service stores it."""
        if self.explanation is None:
            return ""
        return orjson.dumps([c.to_dict() for c in self.explanation]).decode()

    def to_json(self) -> bytes:
        """Canonical JSON bytes: the Kafka value and the HTTP body."""
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes | str) -> Action:
        """Decode and validate JSON bytes; raise ActionError naming the offending field."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ActionError("invalid_json", None, f"body is not valid JSON: {exc}") from None
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: Any) -> Action:
        """Validate an already-decoded JSON value; raise ActionError naming the field."""
        return _validate(obj)


#: Optional fields (absent decided_by: the model; an action from before lists had none).
OPTIONAL_FIELDS: Final = ("explanation", "decided_by", "rule")
#: The contract's required fields, in order.
FIELDS: Final = tuple(name for name in Action.__dataclass_fields__
                      if name not in OPTIONAL_FIELDS)
_FIELD_SET: Final = frozenset(FIELDS)
_FIELD_SET_ALL: Final = frozenset((*FIELDS, *OPTIONAL_FIELDS))


def make_action(
    action_type: ActionType,
    *,
    card_id: str,
    txn_id: str,
    ts_ms: int,
    score: float,
    model_version: str,
    decided_at_ms: int,
    explanation: tuple[Contribution, ...] | None = None,
    decided_by: DecidedBy = "model",
    rule: str | None = None,
) -> Action:
    """Build a validated Action, deriving its idempotency key from (type, txn_id); the
    `explanation` is held to the rules of a parsed one (`checked_explanation`), without a
    round trip through dicts."""
    checked = None
    if explanation is not None:
        try:
            checked = checked_explanation(explanation)
        except ExplanationError as exc:
            raise ActionError("bad_format", "explanation", f"explanation: {exc}") from None
    extra: dict[str, Any] = {"decided_by": decided_by}
    if rule is not None:
        extra["rule"] = rule
    return _validate({"idempotency_key": idempotency_key(action_type, txn_id),
                      "type": action_type, "card_id": card_id, "txn_id": txn_id, "ts_ms": ts_ms,
                      "score": score, "model_version": model_version,
                      "decided_at_ms": decided_at_ms, **extra}, checked)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _string(obj: dict[str, Any], name: str, pattern: re.Pattern[str], what: str) -> str:
    value = obj[name]
    if type(value) is not str:
        raise ActionError("wrong_type", name, f"{name}: must be a string, got {_json_type(value)}")
    if not pattern.fullmatch(value):
        raise ActionError("bad_format", name, f"{name}: must be {what}")
    return value


def _timestamp(obj: dict[str, Any], name: str) -> int:
    value = obj[name]
    if type(value) is not int:
        raise ActionError(
            "wrong_type",
            name,
            f"{name}: must be an integer (ms since epoch), got {_json_type(value)}",
        )
    if not MIN_TS_MS <= value <= MAX_TS_MS:
        raise ActionError(
            "out_of_range", name, f"{name}: {value} is outside [{MIN_TS_MS}, {MAX_TS_MS}]"
        )
    return value


def _check_fields(obj: Any) -> None:
    """The object has exactly the contract's fields; else the first missing or unknown one."""
    if not isinstance(obj, dict):
        raise ActionError("not_object", None, f"body must be a JSON object, got {_json_type(obj)}")
    for name in FIELDS:
        if name not in obj:
            raise ActionError("missing_field", name, f"{name}: required field is missing")
    for name in obj:
        if name not in _FIELD_SET_ALL:
            shown = str(name)[:64]
            raise ActionError("unknown_field", shown, f"{shown}: unknown field")


def _validate(obj: Any, explanation: tuple[Contribution, ...] | None = None) -> Action:
    """The Action `obj` says, checked field by field; `explanation`: one checked already (an
    `explanation` in `obj` is parsed instead)."""
    # one set comparison for the usual case; the field-by-field walk only names what is wrong
    if type(obj) is not dict or not _FIELD_SET <= obj.keys() <= _FIELD_SET_ALL:
        _check_fields(obj)
    action_type = obj["type"]
    if type(action_type) is not str:
        raise ActionError(
            "wrong_type", "type", f"type: must be a string, got {_json_type(action_type)}"
        )
    if action_type not in ACTION_TYPES:
        raise ActionError("bad_format", "type", f"type: must be one of {', '.join(ACTION_TYPES)}")
    card_id = _string(obj, "card_id", ID_RE, ID_RULE)
    txn_id = _string(obj, "txn_id", ID_RE, ID_RULE)
    key = obj["idempotency_key"]
    # the derived key is always 32 lower-case hex characters, so a key equal to it needs no
    # format check; only one that differs is checked, to name the right error
    if key != idempotency_key(action_type, txn_id):
        _string(obj, "idempotency_key", KEY_RE, "32 lower-case hex characters")
        raise ActionError(
            "key_mismatch",
            "idempotency_key",
            "idempotency_key: is not idempotency_key(type, txn_id) (see app.actions.key)",
        )
    ts_ms = _timestamp(obj, "ts_ms")
    score = obj["score"]
    if type(score) not in (int, float):
        raise ActionError(
            "wrong_type", "score", f"score: must be a number, got {_json_type(score)}"
        )
    if not (math.isfinite(score) if type(score) is float else abs(score) <= 2**53):
        raise ActionError("out_of_range", "score", "score: must be a finite number")
    model_version = _string(
        obj, "model_version", _MODEL_VERSION_RE, "1..128 printable ASCII characters"
    )
    decided_at_ms = _timestamp(obj, "decided_at_ms")
    if "explanation" in obj:
        try:
            explanation = parse_explanation(obj["explanation"])
        except ExplanationError as exc:
            raise ActionError("bad_format", "explanation", f"explanation: {exc}") from None
    decided_by, rule = _decided_by(obj)
    return Action(
        key, action_type, card_id, txn_id, ts_ms, float(score), model_version, decided_at_ms,
        explanation, decided_by, rule,
    )


def _decided_by(obj: dict[str, Any]) -> tuple[DecidedBy, str | None]:
    """decided_by (default model) and rule: a rule names the list entry, so exactly the
    actions decided by a list carry one."""
    decided_by = obj.get("decided_by", "model")
    if decided_by not in DECIDED_BY:
        raise ActionError("bad_format", "decided_by",
                          f"decided_by: must be one of {', '.join(DECIDED_BY)}")
    rule = obj.get("rule")
    if decided_by == "model":
        if rule is not None:
            raise ActionError("bad_format", "rule", "rule: only for actions decided by a list "
                              "or a rule")
        return "model", None
    if decided_by == "rule":
        if type(rule) is not str or not RULE_VERSION_RE.fullmatch(rule):
            raise ActionError("bad_format", "rule", "rule: required with decided_by rule: "
                              "'<rule id>@<version>'")
        return "rule", rule
    if type(rule) is not str or not RULE_RE.fullmatch(rule):
        raise ActionError("bad_format", "rule", "rule: required with decided_by "
                          f"{decided_by}: '<allow|block>:<card|merchant>:<id>'")
    if not rule.startswith(decided_by.split("_", 1)[0] + ":"):
        raise ActionError("bad_format", "rule", f"rule: {decided_by} needs a rule of its list")
    return decided_by, rule
