"""Kept for old notes: the same as `fraudstream chaos` (run from the repository root)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.chaos import chaos  # noqa: E402

if __name__ == "__main__":
    chaos()
