"""Replay-restart fault suite: kill anything at any moment; every action applied exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.harness.scenarios import EXACTLY_ONCE_SCENARIOS, SCENARIOS
from app.harness.topology import run_scenario
from app.settings import Settings
from app.stack.manager import Stack

pytestmark = [pytest.mark.fault, pytest.mark.slow]

#: Appended under the state directory (FRAUDSTREAM_STATE_DIR), like everything a run writes.
REPORT_NAME = "fault-report.txt"


def _cases() -> list[object]:
    """Every scenario at_least_once (the default); the named subset also exactly_once."""
    cases = []
    for processing, names in (("at_least_once", list(SCENARIOS)),
                              ("exactly_once", list(EXACTLY_ONCE_SCENARIOS))):
        for name in names:
            marks = [pytest.mark.cluster] if SCENARIOS[name].needs_cluster else []
            label = name if processing == "at_least_once" else f"{name}-exactly_once"
            cases.append(pytest.param(name, processing, marks=marks, id=label))
    return cases


@pytest.mark.parametrize(("name", "processing"), _cases())
def test_scenario(name: str, processing: str, stack_settings: Settings, tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    scenario = SCENARIOS[name]
    stack = Stack(stack_settings)
    if scenario.needs_cluster and not (stack.settings.profile == "cluster"
                                       and stack.manages_kafka):
        pytest.skip("runs on the cluster profile only (its own 3 KRaft brokers), which "
                    "`make test-fault-cluster` brings up; this run is on the single node")
    if scenario.needs_local == "kafka" and not stack.manages_kafka:
        pytest.skip("Kafka is external: this scenario restarts the local broker")
    if scenario.needs_local == "redis" and not stack.manages_redis:
        pytest.skip("Redis is external: this scenario restarts the local server")
    report = run_scenario(stack_settings.replace(processing=processing), tmp_path, name,
                          scenario.fault, prepare=scenario.prepare, **scenario.params)
    report_path = stack_settings.state_dir / REPORT_NAME
    report_path.parent.mkdir(parents=True, exist_ok=True)
    with report_path.open("a") as out:
        out.write(report.line() + "\n")
    with capsys.disabled():
        print(f"\n  {report.line()}")
    assert not report.problems, "\n".join(report.problems)
    _require_own_evidence(name, report)
    if scenario.kills:
        # messages processed twice, re-reads recognised and skipped, POSTs retried, or replays
        # absorbed beyond those the log's own redeliveries cause
        extra = {k: int(v) for k, v in report.extra.items()  # type: ignore[call-overload]
                 if isinstance(v, int | float)}
        # (exactly_once: the rows of the transactions the fault left open, then aborted; the
        # messages a killed worker had read past its group's commit)
        # (unfinished_at_kill is not evidence: the kill waits for it, so it is never 0)
        evidence = (extra.get("rereads", 0) + extra.get("reread_skipped", 0)
                    + extra.get("dispatch_retries", 0) + extra.get("aborted_rows", 0)
                    + max(0, report.redeliveries_absorbed - extra.get("log_replays", 0)))
        assert evidence > 0, "the fault caused no redelivery: it tested nothing"
        if extra.get("aborted_rows_required"):
            assert extra.get("aborted_rows", 0) > 0, (
                "exactly_once: the kill hit an open transaction with served rows, yet no row "
                "was aborted")


def _require_own_evidence(name: str, report: object) -> None:
    """What each of these faults must have done to have tested anything: the log's replays
    absorbed by the service (upstream-redelivery), messages led by the broker that was killed
    (kafka-leader-kill), the dispatcher's retries while Redis had no master (redis-master-kill)."""
    extra = {k: v for k, v in report.extra.items()  # type: ignore[attr-defined]
             if isinstance(v, int | float)}
    absorbed = report.redeliveries_absorbed  # type: ignore[attr-defined]
    if name == "upstream-redelivery":
        assert absorbed >= extra.get("log_replays", 0) > 0, (
            f"the log's {extra.get('log_replays', 0)} replays, {absorbed} absorbed")
    elif name == "kafka-leader-kill":
        assert extra.get("partitions_led", 0) > 0 and extra.get("messages_led", 0) > 0, (
            "the killed broker led no partition the replay wrote to")
    elif name == "redis-master-kill":
        assert extra.get("dispatch_retries", 0) > 0, (
            "the dispatcher retried nothing while Redis had no master")
