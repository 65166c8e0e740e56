"""Imports point down: the layers below the Faust app never import `app.stream`, app's packages
form no cycle, and product code (app, benchmarks, scripts) never reaches into the tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
#: packages below stream/ (the Kafka client layer included)
LOWER = ("kafka", "transactions", "stack", "features", "scoring", "drift", "actions", "security",
         "rules", "control", "action_service")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, at any depth (imports inside functions count)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            if "." not in node.module:  # `from app import stream` imports app.stream
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _imports_of(module: str, name: str) -> bool:
    return name == module or name.startswith(module + ".")


@pytest.mark.parametrize("package", LOWER)
def test_a_lower_layer_does_not_import_the_stream_package(package: str) -> None:
    files = sorted((APP / package).rglob("*.py"))
    assert files, f"app/{package} has no modules: the layer list is stale"
    upward = [f"{path.relative_to(APP.parent)}:{line} imports {module}"
              for path in files for line, module in _imports(path)
              if module == "app.stream" or module.startswith("app.stream.")]
    assert not upward, "lower layers reach up into app.stream:\n" + "\n".join(upward)


#: Product code: it imports nothing of the test suite (the harness it shares with the tests is
#: app.harness) and leaves sys.path alone (benchmarks run as `python -m benchmarks.NAME`).
PRODUCT = ("app", "benchmarks", "scripts")
#: (package, package it never imports): the stack starts services without knowing their
#: internals (the key patterns its ACLs grant sit in the leaf app.keyspace); the transaction
#: contract does no Kafka I/O (replaying and importing labels are app.kafka's).
FORBIDDEN = (("stack", "action_service"), ("action_service", "stream"), ("transactions", "kafka"))
#: Leaf modules of shared names: below every package, they import nothing of app.
LEAVES = ("errors", "ids", "keyspace")
_SYS_PATH_EDITS = frozenset({"insert", "append", "extend", "remove", "pop", "clear"})


def _is_sys_path(node: ast.AST | None) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def _sys_path_edits(path: Path) -> list[int]:
    """Lines that change sys.path: `sys.path.insert(...)` and friends, or assignments to it."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _SYS_PATH_EDITS and _is_sys_path(node.func.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                inner = target.value if isinstance(target, ast.Subscript) else target
                if _is_sys_path(inner):
                    lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("folder", PRODUCT)
def test_product_code_does_not_import_the_tests(folder: str) -> None:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"{folder}/ has no modules: the folder list is stale"
    found = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in files for line, module in _imports(path) if _imports_of("tests", module)]
    assert not found, "product code imports the test suite:\n" + "\n".join(found)


@pytest.mark.parametrize("folder", PRODUCT)
def test_product_code_leaves_sys_path_alone(folder: str) -> None:
    found = [f"{path.relative_to(ROOT)}:{line}"
             for path in sorted((ROOT / folder).rglob("*.py")) for line in _sys_path_edits(path)]
    assert not found, "product code edits sys.path:\n" + "\n".join(found)


@pytest.mark.parametrize(("package", "forbidden"), FORBIDDEN)
def test_a_package_does_not_import_what_it_must_not(package: str, forbidden: str) -> None:
    files = sorted((APP / package).rglob("*.py"))
    assert files, f"app/{package} has no modules: the list is stale"
    found = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in files for line, module in _imports(path)
             if _imports_of(f"app.{forbidden}", module)]
    assert not found, f"app.{package} imports app.{forbidden}:\n" + "\n".join(found)


@pytest.mark.parametrize("leaf", LEAVES)
def test_a_leaf_module_imports_nothing_of_app(leaf: str) -> None:
    path = APP / f"{leaf}.py"
    assert path.is_file(), f"no leaf module app/{leaf}.py"
    found = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for line, module in _imports(path) if _imports_of("app", module)]
    assert not found, "a leaf module imports app:\n" + "\n".join(found)


def _package_graph() -> dict[str, dict[str, list[str]]]:
    """Each top-level package (or module) of app → the others it imports, with where."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(APP.rglob("*.py")):
        rel = path.relative_to(APP)
        if rel == Path("__init__.py"):
            continue
        source = rel.parts[0].removesuffix(".py")
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[0] == "app" and len(parts) > 1 and parts[1] != source:
                graph.setdefault(source, {}).setdefault(parts[1], []).append(
                    f"app/{rel}:{line}")
    return graph


def _cycle(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """One cycle of the graph as [a, b, ..., a], or [] when it has none (depth-first)."""
    done: set[str] = set()

    def visit(node: str, trail: list[str]) -> list[str]:
        if node in trail:
            return [*trail[trail.index(node):], node]
        if node in done:
            return []
        for target in sorted(graph.get(node, {})):
            found = visit(target, [*trail, node])
            if found:
                return found
        done.add(node)
        return []

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return []


def test_app_packages_import_each_other_without_a_cycle() -> None:
    graph = _package_graph()
    assert "stream" in graph and "scoring" in graph, "the package graph is empty: the walk is stale"
    cycle = _cycle(graph)
    where = [f"app.{a} -> app.{b}: {', '.join(graph[a][b][:3])}"
             for a, b in zip(cycle, cycle[1:], strict=False)]
    assert not cycle, "a package cycle: " + " -> ".join(cycle) + "\n" + "\n".join(where)
