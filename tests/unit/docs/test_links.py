"""Every relative link in README.md and docs/ names a file or directory inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: `[text](target)` and `![alt](target)`, with an optional `<...>` and title around the target.
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
#: `[label]: target` reference definitions.
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
#: A scheme (`https:`, `mailto:`) or a bare anchor: not a path in the repository.
_NOT_A_PATH = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:|#)")
_CODE_SPAN = re.compile(r"(`+).*?\1")


def pages(root: Path) -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link outside fenced code blocks and code spans."""
    found: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        prose = _CODE_SPAN.sub("", line)
        found.extend((number, m.group(1)) for m in _INLINE.finditer(prose))
        found.extend((number, m.group(1)) for m in _REFERENCE.finditer(prose))
    return found


def broken_links(root: Path) -> list[str]:
    """`page:line: target (why)` for every relative link that leaves `root` or names nothing."""
    root = root.resolve()
    broken = []
    for page in pages(root):
        for number, target in links(page.read_text()):
            if _NOT_A_PATH.match(target):
                continue
            path = target.split("#", 1)[0].split("?", 1)[0]
            resolved = (page.parent / path).resolve()
            where = f"{page.relative_to(root)}:{number}: {target}"
            if resolved != root and root not in resolved.parents:
                broken.append(f"{where} (outside the repository)")
            elif not resolved.exists():
                broken.append(f"{where} (no such file or directory)")
    return broken


def test_every_relative_link_resolves_inside_the_repository() -> None:
    broken = broken_links(ROOT)
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_a_link_outside_the_repository_or_to_nothing_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "a.md").write_text("# a\n")
    (tmp_path / "README.md").write_text(
        "[a](docs/a.md) [top](#a) [web](https://example.org/x.md) [dir](docs/results/)\n"
        "[design](../shared/design.md) and [gone](docs/gone.md#part)\n"
        "```\n[in a fence](nowhere.md)\n```\n"
        "`[in a span](nowhere.md)`\n"
        "[ref]: docs/missing.md\n")
    (tmp_path / "docs" / "b.md").write_text("![plot](../README.md) [up](../../outside.md)\n")
    assert broken_links(tmp_path) == [
        "README.md:2: ../shared/design.md (outside the repository)",
        "README.md:2: docs/gone.md#part (no such file or directory)",
        "README.md:7: docs/missing.md (no such file or directory)",
        "docs/b.md:1: ../../outside.md (outside the repository)",
    ]
