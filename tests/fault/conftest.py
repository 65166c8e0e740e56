"""Fault-suite fixtures: a configured (random) action token, and every log line scanned for it
and for card ids in clear after each scenario."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import Settings
from tests.support.logscan import leaks


@pytest.fixture(scope="session")
def stack_settings(stack_settings: Settings) -> Settings:
    """The shared stack's settings with a token of this run (not the loopback dev token)."""
    return stack_settings.replace(action_token=f"fault-{uuid.uuid4().hex}")


@pytest.fixture(autouse=True)
def no_secrets_or_card_ids_in_logs(stack_settings: Settings, tmp_path: Path) -> Iterator[None]:
    yield
    # process logs only: a RocksDB card store's write-ahead log (NNNNNN.log beside its CURRENT
    # file) holds card ids by design, it is the state itself
    logs = sorted(p for p in tmp_path.rglob("*.log") if not (p.parent / "CURRENT").exists())
    found = leaks(logs, [stack_settings.action_token or ""])
    assert not found, "secrets or card ids in logs:\n" + "\n".join(found[:20])
