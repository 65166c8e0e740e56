"""Imports point down: the layers below the Faust app never import `app.stream`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
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
    return found


@pytest.mark.parametrize("package", LOWER)
def test_a_lower_layer_does_not_import_the_stream_package(package: str) -> None:
    files = sorted((APP / package).rglob("*.py"))
    assert files, f"app/{package} has no modules: the layer list is stale"
    upward = [f"{path.relative_to(APP.parent)}:{line} imports {module}"
              for path in files for line, module in _imports(path)
              if module == "app.stream" or module.startswith("app.stream.")]
    assert not upward, "lower layers reach up into app.stream:\n" + "\n".join(upward)
