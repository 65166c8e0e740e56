"""`fraudstream stack up|down|status|env [--profile single|cluster|secure]` and `fraudstream
topics`: the local services."""

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


#: The single layout with TLS and authentication (app.stack.secure); not a settings profile.
SECURE = "secure"
#: ctx.meta key of the group's --profile (`stack --profile P up`), which a subcommand's overrides.
_GROUP_PROFILE = "fraudstream.stack_profile"

_PROFILE = click.option(
    "--profile", type=click.Choice((*PROFILES, SECURE)), default=None,
    help="single: one Kafka node and one Redis; cluster: three KRaft Kafka nodes (replication "
         "3, min.insync.replicas 2) and a Redis Cluster (3 masters, 1 replica each); secure: "
         "one node of each with TLS and authentication (SASL_SSL Kafka, TLS Redis with an ACL "
         "user, a local CA and generated secrets under the state dir). Default: "
         "FRAUDSTREAM_STACK_PROFILE, else the profile `stack up` last brought up, else single.")


def _chosen(profile: str | None) -> str | None:
    """The subcommand's --profile, else the group's."""
    return profile or click.get_current_context().meta.get(_GROUP_PROFILE)


def _stack(profile: str | None) -> Stack:
    if profile == SECURE:
        from app.stack.secure import SecureStack

        return SecureStack(load_settings())
    return Stack(load_settings(stack_profile=profile))


def _name(st: Stack, profile: str | None) -> str:
    return SECURE if profile == SECURE else st.settings.profile


@click.group()
@_PROFILE
@click.pass_context
def stack(ctx: click.Context, profile: str | None) -> None:
    """Local Kafka (KRaft) and Redis, started from the project's own files (`--profile secure`:
    with TLS and authentication, docs/operations.md)."""
    ctx.meta[_GROUP_PROFILE] = profile


@click.group("secure-stack", hidden=True)
@click.pass_context
def secure_stack(ctx: click.Context) -> None:
    """The old name of `stack --profile secure`."""
    ctx.meta[_GROUP_PROFILE] = SECURE


@stack.command()
@_PROFILE
def up(profile: str | None) -> None:
    """Start Kafka and Redis (unless KAFKA_BOOTSTRAP/REDIS_URL name others), create topics;
    secure: create the CA, certificates and secrets first (once)."""
    profile = _chosen(profile)
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
    _print_status(st, profile)
    if profile == SECURE:
        from app.stack.secure import SecureProfile

        out.print(f"certificates and secrets in {SecureProfile.for_settings(st.settings).directory}"
                  '; clients: eval "$(fraudstream stack env --profile secure)"', highlight=False,
                  soft_wrap=True)


@stack.command()
@_PROFILE
def down(profile: str | None) -> None:
    """Stop, by pid, the services `stack up` started."""
    stopped = _stack(_chosen(profile)).down()
    out.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@stack.command()
@_PROFILE
def status(profile: str | None) -> None:
    """What runs where: every node, its pid and role."""
    profile = _chosen(profile)
    _print_status(_stack(profile), profile)


@stack.command()
@_PROFILE
def env(profile: str | None) -> None:
    """Print export lines: eval "$(fraudstream stack env)" (secure: file paths of secrets,
    never the secrets themselves)."""
    for line in _stack(_chosen(profile)).env_lines():
        click.echo(line)


def _print_status(st: Stack, profile: str | None) -> None:
    table = Table("service", "address", "state", "role", title=f"profile: {_name(st, profile)}")
    for svc in st.status():
        table.add_row(svc.name, svc.address, svc.state, svc.role)
    out.print(table)


for _command in (up, down, status, env):
    secure_stack.add_command(_command)


@click.command()
def topics() -> None:
    """Create the pipeline's topics on the configured cluster (idempotent)."""
    from app.kafka.topics import ensure_topics

    plan = asyncio.run(ensure_topics(load_settings()))
    out.print(f"created: {list(plan.created)}; existing: {list(plan.existing)}")
