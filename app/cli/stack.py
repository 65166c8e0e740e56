"""`fraudstream stack up|down|status|env` and `fraudstream topics`: the local services."""

from __future__ import annotations

import asyncio
import sys

import click
from rich.console import Console
from rich.table import Table

from app.settings import load_settings
from app.stack.kafka import StackError
from app.stack.manager import Stack, StackFailures

console = Console(stderr=True)
#: Tables and reports a person asked for go to stdout; failures to stderr.
out = Console()


@click.group()
def stack() -> None:
    """Local Kafka (KRaft) and Redis, started from the project's own files."""


@stack.command()
def up() -> None:
    """Start Kafka and Redis (unless KAFKA_BOOTSTRAP/REDIS_URL name others), create topics."""
    st = Stack(load_settings())
    try:
        report = st.up()
    except StackFailures as exc:
        for name, why in exc.failures.items():
            first, _, rest = why.partition("\n")
            console.print(f"[red]stack up: {name} failed:[/red] {first}", highlight=False,
                          soft_wrap=True)
            if rest:
                console.print(rest, markup=False, highlight=False)
        sys.exit(1)
    except StackError as exc:
        console.print(f"[red]stack up failed:[/red] {exc}")
        sys.exit(1)
    started = ", ".join(report.started) or "nothing (already running or external)"
    out.print(f"started: {started}; topics created: {len(report.topics.created)}, "
                  f"existing: {len(report.topics.existing)}; ready in {report.seconds['total']:.1f}s")
    _print_status(st)


@stack.command()
def down() -> None:
    """Stop, by pid, the services `stack up` started."""
    stopped = Stack(load_settings()).down()
    out.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@stack.command()
def status() -> None:
    """What runs where."""
    _print_status(Stack(load_settings()))


@stack.command()
def env() -> None:
    """Print export lines: eval "$(fraudstream stack env)"."""
    for line in Stack(load_settings()).env_lines():
        click.echo(line)


def _print_status(st: Stack) -> None:
    table = Table("service", "address", "state")
    for svc in st.status():
        table.add_row(svc.name, svc.address, svc.state)
    out.print(table)


@click.command()
def topics() -> None:
    """Create the pipeline's topics on the configured cluster (idempotent)."""
    from app.stream.topics import ensure_topics

    plan = asyncio.run(ensure_topics(load_settings()))
    out.print(f"created: {list(plan.created)}; existing: {list(plan.existing)}")
