"""A worker restarted on its data directory after a SIGKILL takes its dead predecessor out of
the consumer group at once, instead of waiting for that member's session to time out."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.harness.procs import wait_all_assigned, wait_until
from app.kafka import topics
from app.settings import Settings
from app.stream.app import worker_datadir
from app.stream.kafka.membership import recorded_member
from tests.support.live import StartWorker

pytestmark = pytest.mark.integration


def test_restarted_worker_removes_its_killed_predecessor(fresh_settings: Settings,
                                                         tmp_path: Path,
                                                         start_worker: StartWorker) -> None:
    # a minute's session: were the killed member left to expire, no partition could be
    # assigned to its successor within the 40 s this test waits
    settings = fresh_settings.replace(session_timeout_s=60.0)
    source = settings.topic(topics.TRANSACTIONS)
    first = start_worker(settings, name="first", dispatch=False)
    wait_all_assigned([first], source)
    datadir = worker_datadir(settings.replace(state_dir=tmp_path / "state"), first.port)
    member = wait_until(lambda: recorded_member(datadir, settings.app_id), timeout_s=10,
                        what="the first worker's recorded member id")
    first.kill()
    second = start_worker(settings, name="second", dispatch=False, port=first.port)
    wait_all_assigned([second], source, timeout_s=40)
    said = f"removed the earlier member {member} from group {settings.app_id}"
    wait_until(lambda: said in second.log_path.read_text(), timeout_s=30,
               what="the second worker to log the member it removed")
    # the new process records its own member id in place of the removed one
    assert wait_until(lambda: recorded_member(datadir, settings.app_id) not in (None, member),
                      timeout_s=10, what="the second worker's member id recorded")
