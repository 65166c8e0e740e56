"""The `fraudstream` command: a click group whose subcommands are imported only when used."""

from __future__ import annotations

import importlib
import logging

import click

from app.cli.errors import explain
from app.settings import describe_settings

#: command name -> "module:attribute"; modules load lazily so `fraudstream --help` stays fast
#: and a command never pays for another's imports (Faust, onnxruntime, pyarrow).
COMMANDS: dict[str, str] = {
    "stack": "app.cli.stack:stack",
    "topics": "app.cli.stack:topics",
    "generate": "app.cli.generate:generate",
    "replay": "app.cli.replay:replay",
    "labels": "app.cli.labels:labels",
    "lists": "app.cli.lists:lists",
    "rules": "app.cli.rules:rules",
    "reviews": "app.cli.rules:reviews",
    "backtest": "app.cli.backtest:backtest",
    "quality": "app.cli.quality:quality",
    "worker": "app.cli.worker:worker",
    "demo": "app.cli.demo:demo",
    "features": "app.cli.features:features",
    "training-set": "app.cli.features:training_set",
    "audit-skew": "app.cli.features:audit_skew",
    "action-service": "app.cli.action_service:action_service",
    "dispatcher": "app.cli.worker:dispatcher",
    "model": "app.cli.model:model",
    "score": "app.cli.score:score",
    "watch": "app.cli.watch:watch",
    "chaos": "app.cli.chaos:chaos",
}
#: Old names that still run, not listed: `train` is `model train`, `secure-stack` is
#: `stack --profile secure`.
ALIASES: dict[str, str] = {
    "train": "app.cli.model:train",
    "secure-stack": "app.cli.stack:secure_stack",
}


#: Long-running commands: their logs are for operators and keep every library's warnings.
SERVICES: frozenset[str] = frozenset({"worker", "dispatcher", "action-service", "quality"})


class LazyGroup(click.Group):
    """A click group that imports each subcommand's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name) or ALIASES.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            command: click.Command = getattr(importlib.import_module(module_name), attr)
        except Exception as exc:  # any failure to load: the command's own error, not "No such"
            return unloadable(cmd_name, target, exc)
        return command

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; an expected failure becomes one line and exit 1 (`-v`: traceback)."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            line = explain(exc)
            if line is None or ctx.params.get("verbose", 0) > 0:
                raise
            raise click.ClickException(line) from None


def unloadable(name: str, target: str, exc: Exception) -> click.Command:
    """A stand-in for a command whose module failed to load: running it (with any arguments,
    --help included) is one error naming the command; `-v` shows the traceback."""
    why = f"{type(exc).__name__}: {exc}"

    def fail() -> None:
        if click.get_current_context().find_root().params.get("verbose"):
            raise exc
        raise click.ClickException(f"the `{name}` command could not be loaded ({target}): {why}")

    return click.Command(name, callback=fail, help=f"Could not be loaded: {why}",
                         short_help=f"(could not be loaded: {type(exc).__name__})",
                         add_help_option=False,
                         context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True})


def _settings_epilog() -> str:
    lines = ["\b", "Environment variables (all optional):"]
    for env, default, doc in describe_settings():
        lines.append(f"  {env} [default: {default or 'unset'}]  {doc}")
    return "\n".join(lines)


@click.group(cls=LazyGroup, epilog=_settings_epilog(), context_settings={"max_content_width": 120})
@click.option("-v", "--verbose", count=True,
              help="More log output (-v info, -vv debug); a failure shows its traceback.")
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """fraudstream: real-time card-fraud scoring on Kafka."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if ctx.invoked_subcommand == "action-service":
        # its start line (where it listens) is shown at any level; the service's own INFO
        # lines (one per request) stay behind -v
        logging.getLogger("app.cli.action_service").setLevel(min(level, logging.INFO))
    if verbose == 0 and ctx.invoked_subcommand not in SERVICES:
        # A short command explains an unreachable broker in one line of its own; aiokafka's
        # per-attempt connection errors would only repeat it. Services keep them in their logs.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


if __name__ == "__main__":
    cli()
