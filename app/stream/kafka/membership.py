"""A restarted worker takes its dead predecessor out of the consumer group at once.

A SIGKILLed worker stays a member of the group until its session times out (10 s by default):
its replacement's join waits for that, so a crash cost at least the session timeout before
anything was scored again, however fast the local card store came back. Each worker records
its group member id in its data directory (`state_dir/worker-<port>`) whenever partitions are
assigned to it; the next process on that directory sends a LeaveGroup for that id before it
joins, and the group rebalances without waiting.

Only the process that owns the data directory does this (one worker per directory: its card
store's lock), so the member it removes is its own previous life. Were that process somehow
still alive, it would be told so at its next heartbeat or commit and join again: its
uncommitted work is re-read, as after any rebalance. The leave is best effort: any error is
reported (the worker logs the outcome once Faust's logging is up) and the worker starts anyway
(the session timeout then removes the dead member).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from app.security.kafka import kafka_client_kwargs
from app.settings import Settings

#: the file, in the worker's data directory, holding its last group member id
MEMBER_FILE = "group-member"
LEAVE_TIMEOUT_S = 10.0


def remember_member(datadir: Path, group: str, member_id: str) -> None:
    """Record `member_id` of `group` as this directory's worker's (atomic replace; no write
    when unchanged)."""
    path = datadir / MEMBER_FILE
    text = f"{group}\n{member_id}\n"
    try:
        if path.read_text() == text:
            return
    except FileNotFoundError:
        pass
    datadir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def recorded_member(datadir: Path, group: str) -> str | None:
    """The member id of `group` the last worker on this directory recorded, if any."""
    try:
        recorded_group, member = (datadir / MEMBER_FILE).read_text().split("\n")[:2]
    except (FileNotFoundError, ValueError):
        return None
    return member if recorded_group == group and member else None


async def leave_for_predecessor(settings: Settings, datadir: Path) -> str:
    """Send a LeaveGroup for the member id recorded in `datadir`; what happened, in words."""
    member = recorded_member(datadir, settings.app_id)
    if member is None:
        return "no earlier member recorded"
    try:
        error = await asyncio.wait_for(_leave(settings, member), LEAVE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - best effort: the session timeout still works
        return f"could not remove the earlier member {member} ({exc!r}): its session expires"
    if error is None:
        outcome = f"removed the earlier member {member} from group {settings.app_id}"
    else:  # UnknownMemberId: its session had already expired, or it left cleanly
        outcome = f"the earlier member {member} was no longer in the group ({error})"
    (datadir / MEMBER_FILE).unlink(missing_ok=True)
    return outcome


async def _leave(settings: Settings, member: str) -> str | None:
    """The broker's error name for a LeaveGroup of `member`, None when it left."""
    import aiokafka.errors as errors
    from aiokafka.client import AIOKafkaClient, CoordinationType
    from aiokafka.protocol.group import LeaveGroupRequest

    client = AIOKafkaClient(**kafka_client_kwargs(settings))
    try:
        await client.bootstrap()
        node = await client.coordinator_lookup(CoordinationType.GROUP, settings.app_id)
        response = await client.send(node, LeaveGroupRequest(settings.app_id, member))
    finally:
        await client.close()
    error = errors.for_code(response.error_code)
    return None if error is errors.NoError else error.__name__
