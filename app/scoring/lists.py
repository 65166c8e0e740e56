"""Allow and block lists: their entries, a snapshot of them, and the rule that applies one to a
model decision (pure: the worker and the offline backtest call the same `rule`).

An entity (a card or a merchant) is on at most one list: putting it on the other list replaces
its entry. A transaction's entry is its card's, else its merchant's: the card is the more
specific fact (a VIP card keeps its allowance at a blocked merchant, a mule card stays blocked
at an allowed one).

- block: the transaction freezes its card (freeze_card + alert_customer), whatever the score.
- allow: a freeze the model decided is downgraded to an alert (the action says so); an alert
  or nothing stays as the model decided.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

import orjson

from app.actions.action import DecidedBy
from app.actions.key import ActionType
from app.errors import FieldError
from app.ids import ID_RE, ID_RULE

ListName = Literal["allow", "block"]
EntityKind = Literal["card", "merchant"]
LIST_NAMES: Final[tuple[ListName, ...]] = get_args(ListName)
ENTITY_KINDS: Final[tuple[EntityKind, ...]] = get_args(EntityKind)
MAX_REASON_CHARS: Final = 500
#: Control-topic keys of list entries start with this (the model activation's key does not).
CONTROL_KEY_PREFIX: Final = b"list:"
_BODY_FIELDS: Final = ("list", "reason")
_ENTRY_FIELDS: Final = ("list", "kind", "id", "reason", "by", "at_ms")
FREEZE: Final[tuple[ActionType, ...]] = ("freeze_card", "alert_customer")
ALERT: Final[tuple[ActionType, ...]] = ("alert_customer",)


class ListEntryError(FieldError):
    """A list entry (request body, file row, path part) that is not acceptable; `field` names
    the culprit."""


@dataclass(frozen=True, slots=True)
class ListEntry:
    """One entity on one list, who put it there, when and why."""

    list: ListName
    kind: EntityKind
    id: str
    reason: str
    by: str
    at_ms: int

    @property
    def key(self) -> str:
        """The entity: "<kind>:<id>" (one entry per entity)."""
        return f"{self.kind}:{self.id}"

    @property
    def rule(self) -> str:
        """How an action names this entry: "<list>:<kind>:<id>"."""
        return f"{self.list}:{self.kind}:{self.id}"

    def control_key(self) -> bytes:
        """Its key on the compacted control topic (latest wins, a tombstone removes it)."""
        return control_key(self.kind, self.id)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _ENTRY_FIELDS}

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes | str) -> ListEntry:
        """A stored entry (the control topic's value, a lists file's line); ListEntryError."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ListEntryError(None, "not valid JSON") from None
        if not isinstance(obj, dict):
            raise ListEntryError(None, "must be a JSON object")
        for name in obj:
            if name not in _ENTRY_FIELDS:
                raise ListEntryError(str(name)[:64], f"{str(name)[:64]}: unknown field")
        kind = check_kind(obj.get("kind"))
        entity_id = check_entity_id(obj.get("id"))
        list_name, reason = _list_and_reason(obj)
        by, at_ms = obj.get("by"), obj.get("at_ms")
        if not isinstance(by, str) or not 1 <= len(by) <= 64 or not by.isprintable():
            raise ListEntryError("by", "by: must be 1..64 printable characters")
        if type(at_ms) is not int or at_ms < 0:
            raise ListEntryError("at_ms", "at_ms: must be a non-negative integer (ms)")
        return cls(list_name, kind, entity_id, reason, by, at_ms)


def control_key(kind: EntityKind, entity_id: str) -> bytes:
    """The control-topic key of an entity's entry."""
    return CONTROL_KEY_PREFIX + f"{kind}:{entity_id}".encode()


def check_kind(value: Any) -> EntityKind:
    if value not in ENTITY_KINDS:
        raise ListEntryError("kind", f"kind: must be one of {', '.join(ENTITY_KINDS)}")
    return value  # type: ignore[no-any-return]


def check_entity_id(value: Any) -> str:
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise ListEntryError("id", f"id: must be {ID_RULE}")
    return value


def _list_and_reason(obj: Mapping[str, Any]) -> tuple[ListName, str]:
    list_name = obj.get("list")
    if list_name not in LIST_NAMES:
        raise ListEntryError("list", f"list: required, one of {', '.join(LIST_NAMES)}")
    reason = obj.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ListEntryError("reason", "reason: required, a non-empty string")
    if len(reason) > MAX_REASON_CHARS or not reason.isprintable():
        raise ListEntryError("reason", f"reason: at most {MAX_REASON_CHARS} printable characters")
    return list_name, reason


def parse_request(kind: Any, entity_id: Any, raw: bytes, *, by: str, at_ms: int) -> ListEntry:
    """An entry as asked for (PUT /v1/lists/{kind}/{id} with a JSON body {list, reason});
    ListEntryError naming the field."""
    kind = check_kind(kind)
    entity_id = check_entity_id(entity_id)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ListEntryError(None, "body: not valid JSON") from None
    if not isinstance(body, dict):
        raise ListEntryError(None, "body: must be a JSON object")
    for name in body:
        if name not in _BODY_FIELDS:
            shown = str(name)[:64]
            raise ListEntryError(shown, f"{shown}: unknown field (allowed: list, reason)")
    list_name, reason = _list_and_reason(body)
    return ListEntry(list_name, kind, entity_id, reason, by, at_ms)


@dataclass(frozen=True, slots=True)
class Lists:
    """Every current entry by entity ("<kind>:<id>"); immutable, swapped whole between batches."""

    entries: Mapping[str, ListEntry] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, entries: Iterable[ListEntry]) -> Lists:
        """Entries in order: a later one for the same entity replaces the earlier one."""
        return cls(MappingProxyType({e.key: e for e in entries}))

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, card_id: str, merchant_id: str) -> ListEntry | None:
        """The entry that applies to a transaction: its card's, else its merchant's."""
        if not self.entries:
            return None
        return self.entries.get(f"card:{card_id}") or self.entries.get(f"merchant:{merchant_id}")


EMPTY: Final = Lists()


@dataclass(frozen=True, slots=True)
class Ruling:
    """What is done about one transaction and who decided it."""

    types: tuple[ActionType, ...]
    decided_by: DecidedBy
    rule: str | None  # the entry that decided, "<list>:<kind>:<id>"; None for the model


def rule(model_types: tuple[ActionType, ...], entry: ListEntry | None) -> Ruling:
    """Apply a transaction's list entry (or None) to the model's decision."""
    if entry is None:
        return Ruling(model_types, "model", None)
    if entry.list == "block":
        return Ruling(FREEZE, "block_list", entry.rule)
    if "freeze_card" in model_types:
        return Ruling(ALERT, "allow_list", entry.rule)
    return Ruling(model_types, "model", None)  # the allowance changed nothing


def read_lists_file(lines: Iterable[bytes]) -> Lists:
    """A lists file (JSONL of entries, as `fraudstream lists show --json` writes them); a bad
    line raises ListEntryError with its line number."""
    entries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(ListEntry.from_json(line))
        except ListEntryError as exc:
            raise ListEntryError(exc.field, f"line {number}: {exc.reason}") from None
    return Lists.of(entries)
