"""A shim for `fraudstream chaos`: `python scripts/chaos.py [SCENARIO]` runs the same command."""

from __future__ import annotations

from app.cli.chaos import chaos

if __name__ == "__main__":
    chaos()
