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
    "secure-stack": "app.cli.secure_stack:secure_stack",
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
    "train": "app.cli.model:train",
    "model": "app.cli.model:model",
    "score": "app.cli.score:score",
    "watch": "app.cli.watch:watch",
    "chaos": "app.cli.chaos:chaos",
}


#: Long-running commands: their logs are for operators and keep every library's warnings.
SERVICES: frozenset[str] = frozenset({"worker", "dispatcher", "action-service", "quality"})


class LazyGroup(click.Group):
    """A click group that imports each subcommand's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None  # not built yet
            raise
        return getattr(module, attr)

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
