"""docs/features.md is derived from the feature declaration and must not drift from it."""

from __future__ import annotations

from pathlib import Path

from app.features.declaration import FEATURE_NAMES, render_markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "features.md"


def test_feature_doc_is_the_rendered_declaration() -> None:
    text = DOC.read_text()
    assert text.endswith(render_markdown()), "regenerate docs/features.md from the declaration"
    for name in FEATURE_NAMES:
        assert f"`{name}`" in text
