"""A rule version: its id, expression, action, mode, owner and reason, immutable once written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

import orjson

from app.rules.language import Expression, RuleSyntaxError, parse

RuleAction = Literal["freeze_card", "alert_customer", "review", "allow"]
RuleMode = Literal["active", "log_only", "disabled"]
RULE_ACTIONS: Final[tuple[RuleAction, ...]] = get_args(RuleAction)
RULE_MODES: Final[tuple[RuleMode, ...]] = get_args(RuleMode)
RULE_ID_RE: Final = re.compile(r"[a-z0-9][a-z0-9_\-]{0,63}")
#: Control-topic keys of rules start with this: one key per version (`rule:<id>@<version>`), so
#: compaction keeps every version (the history) and the highest is the rule's current one.
CONTROL_KEY_PREFIX: Final = b"rule:"
MAX_TEXT_CHARS: Final = 500
#: The fields a request may set (POST /v1/rules, a rules file's line); the rest are the store's.
REQUEST_FIELDS: Final = ("id", "expression", "action", "mode", "owner", "reason", "order")
_FIELDS: Final = (*REQUEST_FIELDS, "version", "author", "at_ms")


class RuleError(ValueError):
    """A rule that cannot be written: `field` names the culprit; for an expression, `line` and
    `column` point into it."""

    def __init__(self, rule_id: str | None, field_name: str | None, reason: str,
                 line: int | None = None, column: int | None = None) -> None:
        where = f"rule {rule_id}: " if rule_id else ""
        at = f" at {line}:{column}" if line is not None else ""
        super().__init__(f"{where}{field_name or 'body'}{at}: {reason}")
        self.rule_id = rule_id
        self.field = field_name
        self.reason = reason
        self.line = line
        self.column = column

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": str(self), "rule": self.rule_id, "field": self.field}
        if self.line is not None:
            out["position"] = {"line": self.line, "column": self.column}
        return out


@dataclass(frozen=True, slots=True)
class Rule:
    """One version of one rule. `order` places it among the others (lower first, then id)."""

    id: str
    version: int
    expression: str
    action: RuleAction
    mode: RuleMode
    owner: str
    reason: str
    order: int
    author: str
    at_ms: int

    @property
    def name(self) -> str:
        """How an action names it: "<id>@<version>"."""
        return f"{self.id}@{self.version}"

    def compiled(self) -> Expression:
        return parse(self.expression)

    def control_key(self) -> bytes:
        return CONTROL_KEY_PREFIX + self.name.encode()

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes | str) -> Rule:
        """A stored version (the control topic's value); RuleError when it is not one."""
        obj = _object(raw)
        fields = check_request(obj, partial=False, stored=True)
        version, author, at_ms = obj.get("version"), obj.get("author"), obj.get("at_ms")
        rid = fields["id"]
        if type(version) is not int or version < 1:
            raise RuleError(rid, "version", "must be a positive integer")
        if not isinstance(author, str) or not 1 <= len(author) <= 64:
            raise RuleError(rid, "author", "must be 1..64 characters")
        if type(at_ms) is not int or at_ms < 0:
            raise RuleError(rid, "at_ms", "must be a non-negative integer (ms)")
        return cls(version=version, author=author, at_ms=at_ms, **fields)


def _object(raw: bytes | str) -> dict[str, Any]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise RuleError(None, None, "not valid JSON") from None
    if not isinstance(obj, dict):
        raise RuleError(None, None, "must be a JSON object")
    return obj


def check_request(obj: dict[str, Any], *, partial: bool,
                  stored: bool = False) -> dict[str, Any]:
    """The request's fields, checked (the expression parsed and type-checked too); with
    `partial` (an edit) only those present. RuleError names the first bad field."""
    allowed = _FIELDS if stored else REQUEST_FIELDS
    rid = obj.get("id") if isinstance(obj.get("id"), str) else None
    for name in obj:
        if name not in allowed:
            raise RuleError(rid, str(name)[:64], f"unknown field (allowed: {', '.join(allowed)})")
    out: dict[str, Any] = {}
    required = () if partial else ("id", "expression", "action", "owner", "reason")
    for name in required:
        if name not in obj:
            raise RuleError(rid, name, "required")
    if "id" in obj:
        if not isinstance(obj["id"], str) or not RULE_ID_RE.fullmatch(obj["id"]):
            raise RuleError(None, "id", "must be 1..64 characters of [a-z0-9_-], starting "
                                        "with a letter or digit")
        out["id"] = obj["id"]
    if "expression" in obj:
        text = obj["expression"]
        if not isinstance(text, str):
            raise RuleError(rid, "expression", "must be a string")
        try:
            parse(text)
        except RuleSyntaxError as exc:
            raise RuleError(rid, "expression", exc.message, exc.line, exc.column) from None
        out["expression"] = text.strip()
    if "action" in obj:
        if obj["action"] not in RULE_ACTIONS:
            raise RuleError(rid, "action", f"one of {', '.join(RULE_ACTIONS)}")
        out["action"] = obj["action"]
    if "mode" in obj or not partial:
        mode = obj.get("mode", "active")
        if mode not in RULE_MODES:
            raise RuleError(rid, "mode", f"one of {', '.join(RULE_MODES)}")
        out["mode"] = mode
    for name in ("owner", "reason"):
        if name in obj:
            value = obj[name]
            if (not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT_CHARS
                    or not value.isprintable()):
                raise RuleError(rid, name, f"1..{MAX_TEXT_CHARS} printable characters")
            out[name] = value
    if "order" in obj or (not partial and stored):
        order = obj.get("order")
        if type(order) is not int or not 0 <= order <= 1_000_000:
            raise RuleError(rid, "order", "an integer in [0, 1000000]")
        out["order"] = order
    return out


def read_rules_file(lines: list[bytes]) -> list[Rule]:
    """A rules file: one JSON rule a line, as `fraudstream rules show --json` prints them, or
    only {id, expression, action} (and mode, owner, reason, order when wanted: a rule not yet
    written, version 1, its order its line's). RuleError names the line."""
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = _object(line)
            if "version" in obj:
                out.append(Rule.from_json(line))
                continue
            fields = check_request({"owner": "backtest", "reason": "backtest",
                                    "order": number * 10, **obj}, partial=False)
            out.append(Rule(version=1, author="backtest", at_ms=0, **fields))
        except RuleError as exc:
            raise RuleError(exc.rule_id, exc.field, f"line {number}: {exc.reason}", exc.line,
                            exc.column) from None
    return out
