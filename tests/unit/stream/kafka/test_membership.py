"""The group member id a worker records in its data directory (app.stream.kafka.membership)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.settings import load_settings
from app.stream.kafka.membership import (
    MEMBER_FILE,
    leave_for_predecessor,
    recorded_member,
    remember_member,
)


def test_recorded_per_group_and_replaced_atomically(tmp_path: Path) -> None:
    datadir = tmp_path / "worker-1"
    assert recorded_member(datadir, "g") is None
    remember_member(datadir, "g", "m-1")
    assert recorded_member(datadir, "g") == "m-1"
    assert recorded_member(datadir, "other-group") is None  # never leaves another group's member
    mtime = (datadir / MEMBER_FILE).stat().st_mtime_ns
    remember_member(datadir, "g", "m-1")  # unchanged: not rewritten
    assert (datadir / MEMBER_FILE).stat().st_mtime_ns == mtime
    remember_member(datadir, "g", "m-2")
    assert recorded_member(datadir, "g") == "m-2"
    assert [p.name for p in datadir.iterdir()] == [MEMBER_FILE]  # no temporary file left


def test_nothing_recorded_sends_nothing(tmp_path: Path) -> None:
    settings = load_settings().replace(kafka_bootstrap="127.0.0.1:1")  # nothing listens there
    assert asyncio.run(leave_for_predecessor(settings, tmp_path)) == "no earlier member recorded"


def test_unreachable_broker_is_reported_and_start_goes_on(tmp_path: Path) -> None:
    settings = load_settings().replace(kafka_bootstrap="127.0.0.1:1")
    remember_member(tmp_path, settings.app_id, "m-1")
    outcome = asyncio.run(leave_for_predecessor(settings, tmp_path))
    assert outcome.startswith("could not remove the earlier member m-1"), outcome
    assert recorded_member(tmp_path, settings.app_id) == "m-1"  # kept: tried again next start
