"""One id alphabet (app.ids): written once, and the same wherever an id is checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.action_service.openapi import build_openapi
from app.ids import ID_ANCHORED, ID_PATTERN, ID_RE, ID_RULE

APP = Path(__file__).resolve().parents[2] / "app"


def test_the_alphabet_is_written_only_in_the_leaf_module() -> None:
    found = [f"{path.relative_to(APP.parent)}:{n}"
             for path in sorted(APP.rglob("*.py")) if path != APP / "ids.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "A-Za-z0-9_.:" in line]
    assert not found, "the id alphabet is spelled out again:\n" + "\n".join(found)


@pytest.mark.parametrize(("value", "ok"), [
    ("a", True), ("c0000001", True), ("-", True), ("tx:1.2_3-4", True), ("A" * 64, True),
    ("", False), ("A" * 65, False), ("a b", False), ("é", False), ("a/b", False), ("a\\b", False),
    ("[", False), ("a\n", False)])
def test_an_id_is_one_to_64_of_the_alphabet(value: str, ok: bool) -> None:
    assert bool(ID_RE.fullmatch(value)) is ok
    assert bool(re.fullmatch(ID_ANCHORED, value)) is ok
    assert ID_RULE == "1..64 characters of [A-Za-z0-9_.:-]"


def _patterns(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for value in node.values() for p in _patterns(value)]
    if isinstance(node, list):
        return [p for value in node for p in _patterns(value)]
    return []


def test_the_openapi_document_states_the_same_pattern() -> None:
    ids = [p for p in _patterns(build_openapi()) if "A-Za-z0-9" in p]
    assert ids.count(ID_ANCHORED) >= 3  # card and txn ids, list entities, decision keys
    assert all(ID_PATTERN in p for p in ids)
