"""The `fraudstream` command: a click group whose subcommands are imported only when used."""

from __future__ import annotations

import importlib
import logging

import click

from app.settings import describe_settings

#: command name -> "module:attribute"; modules load lazily so `fraudstream --help` stays fast
#: and a command never pays for another's imports (Faust, onnxruntime, pyarrow).
COMMANDS: dict[str, str] = {
    "stack": "app.cli.stack:stack",
    "topics": "app.cli.stack:topics",
    "secure-stack": "app.cli.secure_stack:secure_stack",
    "generate": "app.cli.generate:generate",
    "replay": "app.cli.replay:replay",
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
}


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


def _settings_epilog() -> str:
    lines = ["\b", "Environment variables (all optional):"]
    for env, default, doc in describe_settings():
        lines.append(f"  {env} [default: {default or 'unset'}]  {doc}")
    return "\n".join(lines)


@click.group(cls=LazyGroup, epilog=_settings_epilog(), context_settings={"max_content_width": 120})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """fraudstream: real-time card-fraud scoring on Kafka."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":
    cli()
