"""`fraudstream chaos [SCENARIO]`: run one fault scenario by hand and watch the system heal."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from app.settings import load_settings


def _scenarios() -> dict[str, Any]:
    """The fault suite's scenarios (app.harness, imported only when chaos runs: it is heavy)."""
    from app.harness.scenarios import SCENARIOS

    return SCENARIOS


@click.command(context_settings={"max_content_width": 120})
@click.argument("scenario", required=False)
@click.option("--list", "show", is_flag=True, help="List the scenarios, one line each.")
def chaos(scenario: str | None, show: bool) -> None:
    """Run SCENARIO against the real topology (action service + two workers) with live progress.

    Without SCENARIO, list them. Uses the local stack (started if needed) or
    KAFKA_BOOTSTRAP/REDIS_URL, on fresh topics; prints lag, effects and redeliveries absorbed
    every second while it recovers, then every invariant's verdict.
    """
    scenarios = _scenarios()
    if show or scenario is None:
        width = max(len(name) for name in scenarios)
        for name, spec in scenarios.items():
            click.echo(f"{name:{width}}  {spec.about or '(no description)'}")
        return
    if scenario not in scenarios:
        raise click.ClickException(f"no scenario {scenario!r}: `fraudstream chaos --list` "
                                   f"lists them")
    from app.harness.topology import run_scenario
    from app.stack.manager import Stack

    spec = scenarios[scenario]
    stack = Stack(load_settings())
    if spec.needs_cluster and stack.settings.profile != "cluster":
        raise click.ClickException(f"{scenario} runs on the cluster profile: "
                                   f"`fraudstream stack up --profile cluster` first")
    stack.up()
    settings = stack.settings.replace(kafka_bootstrap=stack.settings.effective_kafka_bootstrap,
                                      redis_url=stack.settings.effective_redis_url)
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        report = run_scenario(settings, Path(tmp), scenario, spec.fault, prepare=spec.prepare,
                              progress=True, **spec.params)
    click.echo(report.line())
    for problem in report.problems:
        click.echo(f"BROKEN: {problem}")
    click.echo("all invariants hold" if not report.problems else "INVARIANTS BROKEN")
    sys.exit(1 if report.problems else 0)
