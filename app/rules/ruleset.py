"""The current rules, compiled once per version set, evaluated over a batch of scored rows.

Precedence (the worker and the backtest apply the same app.scoring.policy.ruling): a list entry decides first
(block list: freeze; allow list: the model's freeze becomes an alert, rules are not asked), then
the first *active* rule in (order, id) that holds for the row, then the model's thresholds.
`log_only` rules are evaluated on every row and count their hits, acting on nothing; `disabled`
ones are not evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Protocol

import numpy as np

from app.features.declaration import FEATURE_NAMES
from app.rules.language import TXN_FIELDS, Columns, Expression
from app.rules.plan import Plan
from app.rules.rule import Rule

_FEATURE_INDEX: Final = {name: i for i, name in enumerate(FEATURE_NAMES)}
_HOUR_MS: Final = 3_600_000


class Listed(Protocol):
    """What a rule reads of a row's list entry (app.scoring.lists.ListEntry has it): its list.
    A Protocol, not the entry's class: the rules sit below scoring, which applies them."""

    @property
    def list(self) -> str: ...


class Row(Protocol):
    """What a rule reads of a scored row (app.stream.engine.pipeline.Scored has it)."""

    @property
    def txn(self) -> Any: ...

    @property
    def features(self) -> tuple[int | float, ...]: ...


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One batch through the rules: per row the index (into RuleSet.rules) of the active rule
    that decides it (-1: none), and per rule its hits (active and log_only alike)."""

    deciding: np.ndarray
    hits: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Every rule's current version by id, and the evaluated ones compiled, in order."""

    current: Mapping[str, Rule] = field(default_factory=lambda: MappingProxyType({}))
    rules: tuple[Rule, ...] = ()
    compiled: tuple[Expression, ...] = ()
    #: indices (into `rules`) of the active ones
    active_index: tuple[int, ...] = ()
    plan: Plan | None = None

    @classmethod
    def of(cls, versions: Iterable[Rule]) -> RuleSet:
        """The latest version of each id among `versions` (a higher version replaces a lower
        one, whatever the order they come in)."""
        current: dict[str, Rule] = {}
        for r in versions:
            have = current.get(r.id)
            if have is None or r.version > have.version:
                current[r.id] = r
        live = sorted((r for r in current.values() if r.mode != "disabled"),
                      key=lambda r: (r.order, r.id))
        compiled = tuple(r.compiled() for r in live)
        return cls(MappingProxyType(current), tuple(live), compiled,
                   tuple(i for i, r in enumerate(live) if r.mode == "active"),
                   Plan(compiled) if compiled else None)

    def __len__(self) -> int:
        return len(self.rules)

    @property
    def names(self) -> frozenset[str]:
        """Every name the evaluated rules read."""
        return frozenset().union(*(e.names for e in self.compiled))

    def evaluate(self, rows: Sequence[Row], scores: np.ndarray,
                 entries: Sequence[Listed | None] | None = None) -> Evaluation:
        """The rules over one batch of scored rows (`entries`: each row's list entry)."""
        n = len(rows)
        if not self.rules or not n:
            return Evaluation(np.full(n, -1, dtype=np.int64), (0,) * len(self.rules))
        return self.evaluate_columns(Columns(n, _getter(rows, scores), listed(entries, n)))

    def evaluate_columns(self, cols: Columns) -> Evaluation:
        """The rules over a batch given as columns (the offline table's, or a batch's)."""
        if self.plan is None:
            return Evaluation(np.full(cols.size, -1, dtype=np.int64), ())
        masks = self.plan.masks(cols)
        hits = tuple(masks.sum(axis=1).tolist())
        if not self.active_index:
            return Evaluation(np.full(cols.size, -1, dtype=np.int64), hits)
        index = np.asarray(self.active_index, dtype=np.int64)
        active = masks if len(index) == len(self.rules) else masks[index]
        # the first active rule that holds: argmax finds each column's first True
        first = active.argmax(axis=0)
        held = active[first, np.arange(cols.size)]
        return Evaluation(np.where(held, index[first], -1).astype(np.int64), hits)


def _getter(rows: Sequence[Row], scores: np.ndarray) -> Callable[[str], np.ndarray]:
    def get(name: str) -> np.ndarray:
        if name == "score":
            return np.asarray(scores, dtype=np.float64)
        if name == "hour":
            return np.fromiter(((r.txn.ts_ms // _HOUR_MS) % 24 for r in rows), dtype=np.float64,
                               count=len(rows))
        i = _FEATURE_INDEX.get(name)
        if i is not None:
            return np.fromiter((r.features[i] for r in rows), dtype=np.float64, count=len(rows))
        if TXN_FIELDS[name] == "number":
            return np.fromiter((getattr(r.txn, name) for r in rows), dtype=np.float64,
                               count=len(rows))
        return np.array([getattr(r.txn, name) for r in rows], dtype=object)
    return get


def listed(entries: Sequence[Listed | None] | None, n: int) -> dict[str, np.ndarray]:
    """Per list name, which rows' entry is on it (for `listed()`)."""
    if entries is None:
        return {}
    return {name: np.fromiter((e is not None and e.list == name for e in entries), dtype=bool,
                              count=n) for name in ("block", "allow")}


EMPTY: Final = RuleSet()
