"""Run one fault scenario by hand and watch the system heal.

    .venv/bin/python scripts/chaos.py --list
    .venv/bin/python scripts/chaos.py worker-kill-5x

Uses the local stack (started if needed) or KAFKA_BOOTSTRAP/REDIS_URL; prints lag, effects and
redeliveries absorbed every second while it recovers, then every invariant's verdict.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.settings import load_settings  # noqa: E402
from app.stack.manager import Stack  # noqa: E402
from tests.fault.scenarios import SCENARIOS  # noqa: E402
from tests.support.topology import run_scenario  # noqa: E402


@click.command()
@click.argument("scenario", required=False, type=click.Choice(sorted(SCENARIOS)))
@click.option("--list", "show", is_flag=True, help="List the scenarios.")
def chaos(scenario: str | None, show: bool) -> None:
    """Run SCENARIO against the real topology with live progress."""
    if show or scenario is None:
        for name, spec in SCENARIOS.items():
            click.echo(f"{name:22} {spec.fault.__doc__ or spec.fault.__name__}")
        return
    settings = load_settings()
    Stack(settings).up()
    settings = settings.replace(kafka_bootstrap=settings.effective_kafka_bootstrap,
                                redis_url=settings.effective_redis_url)
    spec = SCENARIOS[scenario]
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        report = run_scenario(settings, Path(tmp), scenario, spec.fault, prepare=spec.prepare,
                              progress=True, **spec.params)
    click.echo(report.line())
    for problem in report.problems:
        click.echo(f"BROKEN: {problem}")
    click.echo("all invariants hold" if not report.problems else "INVARIANTS BROKEN")
    sys.exit(1 if report.problems else 0)


if __name__ == "__main__":
    chaos()
