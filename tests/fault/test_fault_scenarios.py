"""Replay-restart fault suite: kill anything at any moment; every action applied exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.settings import Settings
from app.stack.manager import Stack
from tests.fault.scenarios import SCENARIOS
from tests.support.topology import run_scenario

pytestmark = [pytest.mark.fault, pytest.mark.slow]

REPORT = Path(".fraudstream") / "fault-report.txt"


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(reason=spec.broken, run=False, strict=True))
    if spec.broken else name
    for name, spec in SCENARIOS.items()
])
def test_scenario(name: str, stack_settings: Settings, tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    scenario = SCENARIOS[name]
    stack = Stack(stack_settings)
    if scenario.needs_local == "kafka" and not stack.manages_kafka:
        pytest.skip("Kafka is external: this scenario restarts the local broker")
    if scenario.needs_local == "redis" and not stack.manages_redis:
        pytest.skip("Redis is external: this scenario restarts the local server")
    report = run_scenario(stack_settings, tmp_path, name, scenario.fault,
                          prepare=scenario.prepare, **scenario.params)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    with REPORT.open("a") as out:
        out.write(report.line() + "\n")
    with capsys.disabled():
        print(f"\n  {report.line()}")
    assert not report.problems, "\n".join(report.problems)
    if scenario.kills:
        # messages processed twice, re-reads recognised and skipped, or POSTs retried: the
        # log's own redeliveries (absorbed in every scenario) are not evidence of the fault
        evidence = sum(int(report.extra.get(k, 0))  # type: ignore[call-overload]
                       for k in ("rereads", "reread_skipped", "dispatch_retries"))
        assert evidence > 0, "the fault caused no redelivery: it tested nothing"
