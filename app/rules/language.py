"""The rule language: a boolean expression over a transaction, its features, score and lists.

An expression is parsed by Python's own parser (`ast`, never `eval`) and accepted only when
every node is one of the few below; it is then type-checked against the transaction contract
and the feature declaration, and compiled once into numpy operations over a batch of rows.

    names      the transaction's fields the offline fold reads too (amount_minor, ts_ms:
               numbers; card_id, merchant_id, country: strings; not yet currency, mcc and
               channel: a rule must backtest exactly), every declared feature by name (numbers,
               merchant features included), `score` (the active model's), `hour` (UTC hour of
               day of ts_ms, 0..23)
    literals   integers, decimals, 'strings', True, False
    operators  and, or, not; < <= > >= == != (numbers; == != also strings and booleans;
               chains like 0.2 < score <= 0.6); + - * / on numbers; x in ('US', 'GB'),
               x not in (...) with a tuple or list of literals of x's type
    functions  between(x, lo, hi) (inclusive), abs(x), min(x, y), max(x, y),
               listed('block' | 'allow') (the transaction's card or merchant is on that list)

Numbers are float64: every feature value the worker serves is below 2**53, so comparisons are
exact. x / 0 is ±inf (0 / 0 is NaN), and every comparison with NaN is false.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np

from app.features.declaration import FEATURE_NAMES

Type = Literal["number", "string", "boolean"]
#: The most characters an expression may have (and so the most work one rule can ask for).
MAX_EXPRESSION_CHARS: Final = 2_000
#: The most nodes its tree may have.
MAX_NODES: Final = 400

TXN_FIELDS: Final[Mapping[str, Type]] = {
    "amount_minor": "number", "ts_ms": "number",
    "card_id": "string", "merchant_id": "string", "country": "string",
}
#: Every name an expression may read, with its type.
NAMES: Final[Mapping[str, Type]] = {
    **TXN_FIELDS, **dict.fromkeys(FEATURE_NAMES, "number"), "score": "number", "hour": "number",
}
LIST_NAMES: Final = ("block", "allow")
_COMPARE: Final[Mapping[type, Callable[[Any, Any], Any]]] = {
    ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
    ast.Eq: np.equal, ast.NotEq: np.not_equal,
}
_ARITH: Final[Mapping[type, Callable[[Any, Any], Any]]] = {
    ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.true_divide,
}


class RuleSyntaxError(ValueError):
    """An expression that is not a rule: `line` and `column` (1-based) point at the culprit."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(f"{line}:{column}: {message}")
        self.message = message
        self.line = line
        self.column = column


class Columns:
    """A batch as the compiled expressions read it: one array per name, built on first use;
    a string column also as integer codes (one dict pass per batch, then every comparison and
    `in` of every rule is a numeric one)."""

    __slots__ = ("size", "_get", "_cache", "_codes", "listed")

    def __init__(self, size: int, get: Callable[[str], np.ndarray],
                 listed: Mapping[str, np.ndarray] | None = None) -> None:
        self.size = size
        self._get = get
        self._cache: dict[str, np.ndarray] = {}
        self._codes: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        #: per list name, a bool array: the row's card or merchant is on it
        self.listed = listed or {}

    def __getitem__(self, name: str) -> np.ndarray:
        got = self._cache.get(name)
        if got is None:
            got = self._cache[name] = self._get(name)
        return got

    def codes(self, name: str) -> tuple[np.ndarray, dict[str, int]]:
        """A string column as codes, and the code of each value present."""
        got = self._codes.get(name)
        if got is None:
            table: dict[str, int] = {}
            add = table.setdefault
            values = self[name]
            codes = np.fromiter((add(x, len(table)) for x in values), dtype=np.int64,
                                count=len(values))
            got = self._codes[name] = (codes, table)
        return got


Compiled = Callable[[Columns], Any]  # an array of the batch's size, or a scalar (a literal)


@dataclass(frozen=True, slots=True)
class Expression:
    """A parsed, checked and compiled rule expression."""

    text: str
    names: frozenset[str]  # the names it reads
    evaluate: Compiled

    def mask(self, cols: Columns) -> np.ndarray:
        """The rows it holds for, as a bool array of the batch's size."""
        got = self.evaluate(cols)
        if isinstance(got, np.ndarray) and got.dtype == np.bool_ and got.shape == (cols.size,):
            return got
        return np.broadcast_to(np.asarray(got, dtype=bool), (cols.size,))


def parse(text: str) -> Expression:
    """Parse, check and compile `text`; RuleSyntaxError with the position of the first error."""
    if not isinstance(text, str) or not text.strip():
        raise RuleSyntaxError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise RuleSyntaxError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise RuleSyntaxError(f"syntax: {exc.msg}", exc.lineno or 1, exc.offset or 1) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # a NUL byte, a parser limit
        raise RuleSyntaxError(f"syntax: {exc}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise RuleSyntaxError(f"the expression has more than {MAX_NODES} parts")
    checker = _Checker()
    kind, fn = checker.visit(tree.body)
    if kind != "boolean":
        raise _error(tree.body, f"a rule must be true or false, this is a {kind}")
    return Expression(text.strip(), frozenset(checker.names), fn)


def compile_node(node: ast.AST) -> Expression:
    """A boolean sub-expression of a checked rule, compiled on its own (app.rules.plan)."""
    checker = _Checker()
    kind, fn = checker.visit(node)
    if kind != "boolean":
        raise _error(node, f"expected true or false, got a {kind}")
    return Expression(ast.unparse(node), frozenset(checker.names), fn)


def _error(node: ast.AST, message: str) -> RuleSyntaxError:
    return RuleSyntaxError(message, getattr(node, "lineno", 1),
                           getattr(node, "col_offset", 0) + 1)


def _const(value: Any) -> Compiled:
    return lambda cols: value


class _Checker:
    """Walks the tree once: the type of each node and the function computing it."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit(self, node: ast.AST) -> tuple[Type, Compiled]:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise _error(node, f"{type(node).__name__.lower()} is not part of the rule language")
        return method(node)  # type: ignore[no-any-return]

    def _Constant(self, node: ast.Constant) -> tuple[Type, Compiled]:
        v = node.value
        if isinstance(v, bool):
            return "boolean", _const(v)
        if isinstance(v, int | float):
            try:
                number = float(v)  # rules compute in doubles; an int past their range is refused
            except OverflowError:
                number = math.inf
            if math.isfinite(number):
                return "number", _const(np.float64(number))  # numpy's scalar: no conversion per call
        if isinstance(v, str):
            return "string", _const(v)
        raise _error(node, f"literal {v!r} is not a number, a string or a boolean")

    def _Name(self, node: ast.Name) -> tuple[Type, Compiled]:
        kind = NAMES.get(node.id)
        if kind is None:
            raise _error(node, f"unknown name {node.id!r} (not a transaction field, a declared "
                               "feature, score or hour)")
        self.names.add(node.id)
        name = node.id
        return kind, lambda cols: cols[name]

    def _BoolOp(self, node: ast.BoolOp) -> tuple[Type, Compiled]:
        parts = [self._boolean(v) for v in node.values]
        op = np.logical_and if isinstance(node.op, ast.And) else np.logical_or

        def run(cols: Columns) -> Any:
            acc = parts[0](cols)
            for p in parts[1:]:
                acc = op(acc, p(cols))
            return acc
        return "boolean", run

    def _UnaryOp(self, node: ast.UnaryOp) -> tuple[Type, Compiled]:
        if isinstance(node.op, ast.Not):
            inner = self._boolean(node.operand)
            return "boolean", lambda cols: np.logical_not(inner(cols))
        if isinstance(node.op, ast.USub | ast.UAdd):
            inner = self._number(node.operand)
            if isinstance(node.op, ast.UAdd):
                return "number", inner
            return "number", lambda cols: np.negative(inner(cols))
        raise _error(node, "only not, - and + apply to one operand")

    def _BinOp(self, node: ast.BinOp) -> tuple[Type, Compiled]:
        op = _ARITH.get(type(node.op))
        if op is None:
            raise _error(node, "only + - * / are arithmetic here")
        a, b = self._number(node.left), self._number(node.right)

        def run(cols: Columns) -> Any:
            with np.errstate(divide="ignore", invalid="ignore"):
                return op(a(cols), b(cols))
        return "number", run

    def _Compare(self, node: ast.Compare) -> tuple[Type, Compiled]:
        steps: list[Compiled] = []
        left_node = node.left
        left_kind, left = self.visit(left_node)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                steps.append(self._membership(left_kind, left, op, right_node,
                                              _name_of(left_node)))
                left_kind, left = "boolean", _const(True)  # `a in (..) < b` is refused below
                if len(node.ops) > 1:
                    raise _error(node, "`in` does not chain with other comparisons")
                continue
            fn = _COMPARE.get(type(op))
            if fn is None:
                raise _error(node, "use ==, !=, <, <=, >, >=, in or not in")
            right_kind, right = self.visit(right_node)
            if left_kind != right_kind:
                raise _error(right_node, f"cannot compare a {left_kind} with a {right_kind}")
            if left_kind != "number" and not isinstance(op, ast.Eq | ast.NotEq):
                raise _error(right_node, f"a {left_kind} compares only with == or !=")
            if left_kind == "string":
                steps.append(_string_equal(left, right, _name_of(left_node),
                                           _name_of(right_node), isinstance(op, ast.NotEq)))
            else:
                steps.append(_compare(fn, left, right))
            left_kind, left, left_node = right_kind, right, right_node

        def run(cols: Columns) -> Any:
            acc = steps[0](cols)
            for s in steps[1:]:
                acc = np.logical_and(acc, s(cols))
            return acc
        return "boolean", run

    def _membership(self, kind: Type, left: Compiled, op: ast.cmpop,
                    right: ast.AST, left_name: str | None = None) -> Compiled:
        if not isinstance(right, ast.Tuple | ast.List | ast.Set) or not right.elts:
            raise _error(right, "`in` takes a non-empty (tuple, of, literals)")
        values = []
        for elt in right.elts:
            if not isinstance(elt, ast.Constant):
                raise _error(elt, "`in` takes literals only")
            elt_kind, fn = self._Constant(elt)
            if elt_kind != kind:
                raise _error(elt, f"a {elt_kind} in a list compared with a {kind}")
            values.append(fn(None))  # type: ignore[arg-type]
        negate = isinstance(op, ast.NotIn)
        if kind == "string":
            name = left_name
            members = frozenset(values)
            if name is None:  # a literal on the left
                return lambda cols: (left(cols) in members) != negate

            def strings(cols: Columns) -> Any:
                codes, table = cols.codes(name)
                found = _any_equal(codes, [table[v] for v in members if v in table], cols.size)
                return np.logical_not(found) if negate else found
            return strings
        choices = [np.float64(v) for v in values]

        def run(cols: Columns) -> Any:
            column = left(cols)
            found = _any_equal(np.asarray(column), choices, cols.size)
            return np.logical_not(found) if negate else found
        return run

    def _Call(self, node: ast.Call) -> tuple[Type, Compiled]:
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise _error(node, "call a function by its name, without keywords")
        name, args = node.func.id, node.args
        arity = {"between": 3, "abs": 1, "min": 2, "max": 2, "listed": 1}.get(name)
        if arity is None:
            raise _error(node, f"unknown function {name!r} (between, abs, min, max, listed)")
        if len(args) != arity:
            raise _error(node, f"{name}() takes {arity} argument{'s' * (arity > 1)}")
        if name == "listed":
            arg = args[0]
            if not isinstance(arg, ast.Constant) or arg.value not in LIST_NAMES:
                raise _error(arg, "listed() takes 'block' or 'allow'")
            which = str(arg.value)
            return "boolean", lambda cols: cols.listed.get(which, False)
        fns = [self._number(a) for a in args]
        if name == "between":
            x, lo, hi = fns
            return "boolean", lambda cols: np.logical_and(np.greater_equal(x(cols), lo(cols)),
                                                          np.less_equal(x(cols), hi(cols)))
        if name == "abs":
            return "number", lambda cols: np.abs(fns[0](cols))
        pick = np.minimum if name == "min" else np.maximum
        return "number", lambda cols: pick(fns[0](cols), fns[1](cols))

    def _boolean(self, node: ast.AST) -> Compiled:
        kind, fn = self.visit(node)
        if kind != "boolean":
            raise _error(node, f"expected true or false, got a {kind}")
        return fn

    def _number(self, node: ast.AST) -> Compiled:
        kind, fn = self.visit(node)
        if kind != "number":
            raise _error(node, f"expected a number, got a {kind}")
        return fn


def _compare(fn: Callable[[Any, Any], Any], left: Compiled, right: Compiled) -> Compiled:
    return lambda cols: fn(left(cols), right(cols))


def _name_of(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _string_equal(left: Compiled, right: Compiled, left_name: str | None,
                  right_name: str | None, negate: bool) -> Compiled:
    """== / != of strings: a column against a literal through the column's codes."""
    if left_name is not None and right_name is None:
        name, literal = left_name, right
    elif right_name is not None and left_name is None:
        name, literal = right_name, left
    else:  # two columns, or two literals: elementwise
        op = np.not_equal if negate else np.equal
        return lambda cols: op(left(cols), right(cols))

    def run(cols: Columns) -> Any:
        codes, table = cols.codes(name)
        code = table.get(literal(cols), -1)
        return codes != code if negate else codes == code
    return run


def _any_equal(column: np.ndarray, wanted: list[Any], size: int) -> np.ndarray:
    """column ∈ wanted, as a bool array: == per value for a few (np.isin sorts, and costs tens
    of µs on a batch), np.isin for many."""
    if not wanted:
        return np.zeros(size, dtype=bool)
    if len(wanted) > 8:
        return np.broadcast_to(np.isin(column, wanted), (size,))
    found = column == wanted[0]
    for v in wanted[1:]:
        found = found | (column == v)
    return np.broadcast_to(found, (size,))
