"""Scanning what processes logged for secrets and card ids in clear (the logging contract)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

#: A card id of the generated logs (`c` and 7 digits) standing alone: not inside a hex key.
CARD_ID_RE = re.compile(r"(?<![0-9A-Za-z])c\d{7}(?![0-9A-Za-z])")
#: A UUID (Kafka group member ids, ...): its first group can read like a card id (`c4417164-...`).
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def leaks(paths: Iterable[Path], secrets: Iterable[str], *,
          cards: set[str] | None = None) -> list[str]:
    """'file:line: what' for every line holding a secret or a card id (any, or one of `cards`)."""
    wanted = [s for s in secrets if s]
    found: list[str] = []
    for path in paths:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            hits = [f"secret #{i}" for i, s in enumerate(wanted) if s in line]
            ids = set(CARD_ID_RE.findall(UUID_RE.sub("", line)))
            if cards is not None:
                ids &= cards
            hits += [f"card id {c}" for c in sorted(ids)]
            if hits:
                found.append(f"{path.name}:{number}: {', '.join(hits)}")
    return found
