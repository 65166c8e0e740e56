"""The control partition folded in offset order: lists and rules whole, activations by offset.

Keys: `active_model` (the model every worker serves), `shadow_model` (the candidate scored
beside it), `list:<kind>:<id>` (an entity's allow/block entry; a tombstone removes it) and
`rule:<id>@<version>` (one version of a rule, immutable: a rule's current version is its highest,
and `disabled` is a mode of a version, so nothing is ever deleted). Compaction keeps
the latest record per key, so reading the partition from its start gives the current state.
A record this fold cannot read is logged and skipped: what it replaced stays in force.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from app.rules.rule import CONTROL_KEY_PREFIX as RULE_PREFIX
from app.rules.rule import Rule, RuleError
from app.rules.ruleset import RuleSet
from app.scoring.lists import CONTROL_KEY_PREFIX as LIST_PREFIX
from app.scoring.lists import ListEntry, ListEntryError, Lists

log = logging.getLogger(__name__)

ACTIVE_MODEL_KEY: Final = b"active_model"
SHADOW_MODEL_KEY: Final = b"shadow_model"


def activation_version_of(value: bytes | None) -> str | None:
    """The version an `active_model` record names (None: not a readable one)."""
    try:
        obj = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    version = obj.get("version") if isinstance(obj, dict) else None
    return version if isinstance(version, str) else None


def shadow_version_of(value: bytes | None) -> tuple[bool, str | None]:
    """(is a shadow record, its version or None for "stop")."""
    try:
        obj = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return False, None
    if not isinstance(obj, dict) or "version" not in obj:
        return False, None
    version = obj["version"]
    return (True, version) if version is None or isinstance(version, str) else (False, None)


@dataclass(frozen=True, slots=True)
class Change:
    """What one record changed: which part of the state (`lists`, `rules`, `activation`,
    `shadow`), and for the last two the version (the shadow's may be None: stop)."""

    part: str
    version: str | None = None


class ControlFold:
    """The current lists and rules, and the latest activation and shadow seen."""

    def __init__(self) -> None:
        self._entries: dict[bytes, ListEntry] = {}
        self._rules: dict[bytes, Rule] = {}
        self.activation: str | None = None
        self.shadow: str | None = None

    def apply(self, key: bytes | None, value: bytes | None) -> Change | None:
        """Fold one record; what it changed (None: nothing this fold knows)."""
        if key is None:
            return None
        if key.startswith(LIST_PREFIX):
            return Change("lists") if self._list(key, value) else None
        if key.startswith(RULE_PREFIX):
            return Change("rules") if self._rule(key, value) else None
        if key == ACTIVE_MODEL_KEY:
            version = activation_version_of(value)
            if version is None:
                return None
            self.activation = version
            return Change("activation", version)
        if key == SHADOW_MODEL_KEY:
            ok, found = shadow_version_of(value)
            if not ok:
                return None
            self.shadow = found
            return Change("shadow", found)
        return None

    def _list(self, key: bytes, value: bytes | None) -> bool:
        if value is None:
            return self._entries.pop(key, None) is not None
        try:
            entry = ListEntry.from_json(value)
        except ListEntryError as exc:
            log.error("control topic: list record %r refused: %s", key[:80], exc.reason)
            return False
        if entry.control_key() != key:
            log.error("control topic: list record %r names another entity (%s)", key[:80],
                      entry.key)
            return False
        self._entries[key] = entry
        return True

    def _rule(self, key: bytes, value: bytes | None) -> bool:
        if value is None:
            log.error("control topic: rule record %r without a value (rules are disabled by a "
                      "new version, never deleted)", key[:80])
            return False
        try:
            rule = Rule.from_json(value)
        except RuleError as exc:
            log.error("control topic: rule record %r refused: %s", key[:80], exc)
            return False
        if rule.control_key() != key:
            log.error("control topic: rule record %r names another version (%s)", key[:80],
                      rule.name)
            return False
        have = self._rules.get(key)
        if have is not None:
            if have != rule:
                log.error("control topic: rule %s written twice with different content; the "
                          "first stays", rule.name)
            return False
        self._rules[key] = rule
        return True

    def history(self, rule_id: str) -> list[Rule]:
        """Every version of one rule, oldest first."""
        return sorted((r for r in self._rules.values() if r.id == rule_id),
                      key=lambda r: r.version)

    def lists(self) -> Lists:
        return Lists.of(self._entries.values())

    def rules(self) -> RuleSet:
        return RuleSet.of(self._rules.values())


def fold_records(records: Iterable[Any]) -> ControlFold:
    """A run of control-topic records (anything with .key and .value) folded."""
    fold = ControlFold()
    for rec in records:
        fold.apply(rec.key, rec.value)
    return fold
