"""A rule set's evaluation plan: every rule as a conjunction of atoms, the atoms of all rules
evaluated together, the rules' masks in one matrix product.

Most rules a fraud team writes are `a and b and c` of comparisons between a column and a
constant (`amount_minor > 500000`, `between(score, 0.1, 0.3)`). Evaluated one numpy call at a
time, each comparison costs its call's overhead on every (small) batch; here all comparisons of
one column with one operator, across every rule, are one broadcast comparison
(`column[None, :] > constants[:, None]`), each remaining sub-expression is one compiled
closure (app.rules.language), and a rule holds on a row when none of its atoms is false:
`incidence @ (not atoms) == 0`, one float32 matrix product for the whole set. The masks are the
same as evaluating each expression alone (tests/unit/rules/test_rule_plan.py holds them equal).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from app.rules.language import NAMES, Columns, Expression, compile_node

_OPS: Final[dict[type, tuple[str, str]]] = {  # op: (as written, with the sides swapped)
    ast.Lt: ("lt", "gt"), ast.LtE: ("le", "ge"), ast.Gt: ("gt", "lt"), ast.GtE: ("ge", "le"),
    ast.Eq: ("eq", "eq"), ast.NotEq: ("ne", "ne"),
}
_UFUNCS: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}


@dataclass(frozen=True, slots=True)
class _Threshold:
    name: str
    op: str
    value: float


@dataclass(frozen=True, slots=True)
class _Member:
    """A string column in (or not in) a set of literals."""

    name: str
    values: frozenset[str]
    negate: bool


def _number(node: ast.AST) -> float | None:
    """A numeric literal (possibly negated), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if (isinstance(node, ast.Constant) and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)):
        return float(node.value)
    return None


def _column(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) and NAMES.get(node.id) == "number" else None


def _threshold(left: ast.AST, op: ast.cmpop, right: ast.AST) -> _Threshold | None:
    ops = _OPS.get(type(op))
    if ops is None:
        return None
    name, value = _column(left), _number(right)
    if name is not None and value is not None:
        return _Threshold(name, ops[0], value)
    name, value = _column(right), _number(left)
    if name is not None and value is not None:
        return _Threshold(name, ops[1], value)
    return None


def disjuncts_of(text: str) -> list[list[_Threshold | _Member | ast.AST]]:
    """`text` as an `or` of conjunctions (its top-level `or`s, each an `and` of atoms):
    thresholds, string memberships, and other boolean sub-expressions (as nodes)."""
    body = ast.parse(text.strip(), mode="eval").body
    alternatives = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.Or) \
        else [body]
    return [_conjunction(a) for a in alternatives]


def _conjunction(node: ast.AST) -> list[_Threshold | _Member | ast.AST]:
    parts = node.values if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) \
        else [node]
    out: list[_Threshold | _Member | ast.AST] = []
    for part in parts:
        out.extend(_split(part))
    return out


def _member(node: ast.Compare) -> _Member | None:
    if (len(node.ops) != 1 or not isinstance(node.ops[0], ast.In | ast.NotIn)
            or not isinstance(node.left, ast.Name) or NAMES.get(node.left.id) != "string"):
        return None
    right = node.comparators[0]
    if not isinstance(right, ast.Tuple | ast.List | ast.Set):
        return None
    values = [e.value for e in right.elts if isinstance(e, ast.Constant)]
    if len(values) != len(right.elts) or not all(isinstance(v, str) for v in values):
        return None
    return _Member(node.left.id, frozenset(values), isinstance(node.ops[0], ast.NotIn))


def _split(node: ast.AST) -> list[_Threshold | _Member | ast.AST]:
    if isinstance(node, ast.Compare) and (m := _member(node)) is not None:
        return [m]
    if isinstance(node, ast.Compare) and not any(isinstance(o, ast.In | ast.NotIn)
                                                 for o in node.ops):
        found = []
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            t = _threshold(left, op, right)
            if t is None:
                return [node]
            found.append(t)
            left = right
        return found
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "between" and len(node.args) == 3):
        name, lo, hi = _column(node.args[0]), _number(node.args[1]), _number(node.args[2])
        if name is not None and lo is not None and hi is not None:
            return [_Threshold(name, "ge", lo), _Threshold(name, "le", hi)]
    return [node]


class Plan:
    """The compiled plan of a sequence of checked expressions (see the module doc)."""

    def __init__(self, expressions: Sequence[Expression]) -> None:
        atoms: dict[Any, int] = {}
        groups: dict[tuple[str, str], list[tuple[float, int]]] = {}
        members: dict[str, list[tuple[_Member, int]]] = {}
        closures: list[tuple[int, Expression]] = []
        conjunctions: list[list[int]] = []
        owner: list[int] = []  # the expression of each conjunction
        for e, expr in enumerate(expressions):
            for conjunction in disjuncts_of(expr.text):
                mine = []
                for atom in conjunction:
                    key = ast.dump(atom) if isinstance(atom, ast.AST) else atom
                    index = atoms.get(key)
                    if index is None:
                        index = atoms[key] = len(atoms)
                        if isinstance(atom, _Threshold):
                            groups.setdefault((atom.name, atom.op), []).append(
                                (atom.value, index))
                        elif isinstance(atom, _Member):
                            members.setdefault(atom.name, []).append((atom, index))
                        else:
                            closures.append((index, compile_node(atom)))
                    mine.append(index)
                conjunctions.append(mine)
                owner.append(e)
        self.size = len(atoms)
        self._groups = [(name, _UFUNCS[op], np.array([v for v, _ in items])[:, None],
                         np.array([i for _, i in items], dtype=np.int64))
                        for (name, op), items in groups.items()]
        self._members = [(name, [m for m, _ in items],
                          np.array([i for _, i in items], dtype=np.int64))
                         for name, items in members.items()]
        self._closures = closures
        # conjunctions grouped by their number of atoms: one gather and one all() per group
        self._conjunctions = len(conjunctions)
        self._by_size = _by_size(conjunctions)
        # expressions that are an `or` of several conjunctions: any() over theirs, by count
        alternatives: list[list[int]] = [[] for _ in expressions]
        for c, e in enumerate(owner):
            alternatives[e].append(c)
        self._simple = len(conjunctions) == len(expressions)
        self._alternatives = _by_size(alternatives)
        self._expressions = len(expressions)

    def masks(self, cols: Columns) -> np.ndarray:
        """[expressions, rows] bool: where each expression holds."""
        n = cols.size
        atoms = np.empty((max(1, self.size), n), dtype=bool)
        for name, fn, values, index in self._groups:
            atoms[index] = fn(cols[name][None, :], values)
        for name, found, index in self._members:
            codes, table = cols.codes(name)
            lut = np.zeros((len(found), len(table) + 1), dtype=bool)
            for row, m in enumerate(found):
                for v in m.values:
                    code = table.get(v)
                    if code is not None:
                        lut[row, code] = True
                if m.negate:
                    lut[row] = ~lut[row]
            atoms[index] = lut[:, codes]
        for index, expr in self._closures:
            atoms[index] = expr.mask(cols)
        held = np.empty((self._conjunctions, n), dtype=bool)
        for rows, index in self._by_size:
            held[rows] = atoms[index].all(axis=1)
        if self._simple:
            return held
        out = np.empty((self._expressions, n), dtype=bool)
        for rows, index in self._alternatives:
            out[rows] = held[index].any(axis=1)
        return out


def _by_size(groups: Sequence[Sequence[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(positions, [k, size] members) of the groups of each size."""
    sizes: dict[int, list[int]] = {}
    for g, members in enumerate(groups):
        sizes.setdefault(len(members), []).append(g)
    return [(np.array(rows, dtype=np.int64),
             np.array([groups[g] for g in rows], dtype=np.int64).reshape(len(rows), size))
            for size, rows in sizes.items()]
