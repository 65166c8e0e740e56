"""`fraudstream secure-stack up|down|env`: the local stack on the secure profile (SASL_SSL Kafka,
TLS Redis with an ACL user, a local CA and generated secrets under the state dir)."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from app.settings import load_settings

console = Console(stderr=True)


@click.group("secure-stack")
def secure_stack() -> None:
    """Local Kafka and Redis with TLS and authentication (docs/operations.md, "Secure profile")."""


@secure_stack.command()
def up() -> None:
    """Create the CA, certificates and secrets once, start the secure Kafka and Redis, topics."""
    from app.stack.kafka import StackError
    from app.stack.secure import SecureStack

    st = SecureStack(load_settings())
    try:
        report = st.up()
    except StackError as exc:
        console.print(f"[red]secure stack up failed:[/red] {exc}")
        sys.exit(1)
    console.print(f"started: {', '.join(report.started) or 'nothing (already running)'}; "
                  f"ready in {report.seconds['total']:.1f}s; certificates and secrets in "
                  f"{st.profile.directory}")
    console.print('clients: eval "$(fraudstream secure-stack env)"')


@secure_stack.command()
def down() -> None:
    """Stop, by pid, the secure Kafka and Redis."""
    from app.stack.secure import SecureStack

    stopped = SecureStack(load_settings()).down()
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@secure_stack.command()
def env() -> None:
    """Print export lines for clients (file paths of secrets, never the secrets themselves)."""
    from app.stack.secure import SecureStack

    for line in SecureStack(load_settings()).env_lines():
        click.echo(line)
