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
from app.stack.profile import PROFILES

console = Console(stderr=True)
#: Tables and reports a person asked for go to stdout; failures to stderr.
out = Console()


_PROFILE = click.option(
    "--profile", type=click.Choice(PROFILES), default=None,
    help="single: one Kafka node and one Redis; cluster: three KRaft Kafka nodes (replication "
         "3, min.insync.replicas 2) and a Redis Cluster (3 masters, 1 replica each). Default: "
         "FRAUDSTREAM_STACK_PROFILE, else the profile `stack up` last brought up, else single.")


def _stack(profile: str | None) -> Stack:
    return Stack(load_settings(stack_profile=profile))


@click.group()
def stack() -> None:
    """Local Kafka (KRaft) and Redis, started from the project's own files."""


@stack.command()
@_PROFILE
def up(profile: str | None) -> None:
    """Start Kafka and Redis (unless KAFKA_BOOTSTRAP/REDIS_URL name others), create topics."""
    st = _stack(profile)
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
@_PROFILE
def down(profile: str | None) -> None:
    """Stop, by pid, the services `stack up` started."""
    stopped = _stack(profile).down()
    out.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@stack.command()
@_PROFILE
def status(profile: str | None) -> None:
    """What runs where: every node, its pid and role."""
    _print_status(_stack(profile))


@stack.command()
@_PROFILE
def env(profile: str | None) -> None:
    """Print export lines: eval "$(fraudstream stack env)"."""
    for line in _stack(profile).env_lines():
        click.echo(line)


def _print_status(st: Stack) -> None:
    table = Table("service", "address", "state", "role",
                  title=f"profile: {st.settings.profile}")
    for svc in st.status():
        table.add_row(svc.name, svc.address, svc.state, svc.role)
    out.print(table)


@click.command()
def topics() -> None:
    """Create the pipeline's topics on the configured cluster (idempotent)."""
    from app.kafka.topics import ensure_topics

    plan = asyncio.run(ensure_topics(load_settings()))
    out.print(f"created: {list(plan.created)}; existing: {list(plan.existing)}")
