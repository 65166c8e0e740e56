"""The options the commands share: one spelling, one type and one help text for each."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from app.datagen.config import parse_time_ms

F = TypeVar("F", bound=Callable[..., Any])

#: A file the command reads: it must exist (checked before any work).
INPUT_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
#: A file the command writes (its directory is checked by app.cli.errors.require_parent_dir).
OUTPUT_FILE = click.Path(dir_okay=False, writable=True, path_type=Path)
#: A model directory (one folder per version and a DEFAULT file).
MODEL_DIR = click.Path(file_okay=False, path_type=Path)
#: ctx.meta key under which the `model` group keeps its own --model-dir (an old spelling).
GROUP_MODEL_DIR = "fraudstream.model_dir"


class TimeParam(click.ParamType):
    """A moment: ISO 8601 date or datetime (UTC when it names no zone) or ms since epoch; the
    command gets ms since epoch."""

    name = "TIME"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return parse_time_ms(str(value))
        except ValueError as exc:
            self.fail(f"{exc} (e.g. 2026-01-01T00:00:00Z or 1767225600000)", param, ctx)


#: Every option that names a moment uses this type.
TIME = TimeParam()
#: Said in the help of every TIME option.
TIME_FORMS = "TIME: ISO 8601 (UTC when it names no zone) or ms since epoch."


class Option(click.Option):
    """A click option with old spellings: `old_names` are accepted but left out of --help;
    `old_argument` names an `OldArgument` whose value it takes when that one is given."""

    def __init__(self, *args: Any, old_names: Sequence[str] = (),
                 old_argument: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.old_names = tuple(old_names)
        self.old_argument = old_argument

    def _shown(self) -> list[str]:
        return [o for o in self.opts if o not in self.old_names]

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts, self.opts = self.opts, self._shown()
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts

    def get_error_hint(self, ctx: click.Context) -> str:
        return " / ".join(f"'{o}'" for o in self._shown())

    def consume_value(self, ctx: click.Context,
                      opts: Mapping[str, Any]) -> tuple[Any, ParameterSource]:
        value, source = super().consume_value(ctx, opts)
        old = ctx.meta.get(_old_key(ctx, self.old_argument)) if self.old_argument else None
        if old is None:
            return value, source
        if source is ParameterSource.COMMANDLINE and value != old:
            raise click.UsageError(f"{self._shown()[0]} {value} and the positional {old}: "
                                   f"give it once, as {self._shown()[0]}", ctx=ctx)
        return old, ParameterSource.COMMANDLINE


class OldArgument(click.Argument):
    """An old positional spelling of an option: parsed first, shown nowhere (usage, help);
    the option (an `Option` with `old_argument=` this name) takes its value."""

    def __init__(self, param_decls: Sequence[str], **_attrs: Any) -> None:
        super().__init__(param_decls, required=False, expose_value=False, is_eager=True,
                         callback=self._keep)

    def _keep(self, ctx: click.Context, _param: click.Parameter, value: object) -> None:
        if value is not None:
            ctx.meta[_old_key(ctx, self.name or "")] = value

    def get_usage_pieces(self, ctx: click.Context) -> list[str]:
        return []


def _old_key(ctx: click.Context, name: str) -> str:
    return f"fraudstream.old:{ctx.command_path}:{name}"


def _old_name(old: str | None) -> str | None:
    # its own parameter name: never the option's, whose value it becomes
    return None if old is None else f"old_{old}"


def _with_old(option: Callable[[F], F], old: str | None) -> Callable[[F], F]:
    """`option`, and when `old` is given the old positional it replaces."""
    if old is None:
        return option
    argument = click.argument(_old_name(old), cls=OldArgument)

    def decorate(fn: F) -> F:
        return argument(option(fn))
    return decorate


EVENTS_HELP = "Transaction log in log order (.jsonl or .parquet)."
NOW_HELP = ("Validator clock: event times above it + 1 day are malformed [default: the wall "
            "clock at start].")
LATENESS_HELP = ("Allowed lateness L in ms [default: FRAUDSTREAM_ALLOWED_LATENESS_MS, which "
                 "must match the stream's].")
MODEL_HELP = "Model version [default: the one named by <model dir>/DEFAULT]."


def events_option(help: str = EVENTS_HELP, *, required: bool = True,
                  old: str | None = None) -> Callable[[F], F]:
    """`--events FILE`: the transaction log a command reads (`old`: its old positional)."""
    return _with_old(click.option("--events", "events", cls=Option, type=INPUT_FILE,
                                  required=required, metavar="FILE", help=help,
                                  old_argument=_old_name(old)), old)


def labels_option(help: str, *, required: bool = False, old: str | None = None,
                  dest: str = "labels") -> Callable[[F], F]:
    """`--labels FILE`: a label file (JSONL or Parquet label rows)."""
    return _with_old(click.option("--labels", dest, cls=Option, type=INPUT_FILE,
                                  required=required, metavar="FILE", help=help,
                                  old_argument=_old_name(old)), old)


def time_option(name: str, dest: str, help: str, *, default: int | None = None,
                old_names: Sequence[str] = ()) -> Callable[[F], F]:
    """A moment (`TIME`: ISO 8601 or ms since epoch), given to the command as ms since epoch."""
    return click.option(name, *old_names, dest, cls=Option, type=TIME, default=default,
                        help=f"{help} {TIME_FORMS}", old_names=old_names)


def now_option(help: str = NOW_HELP) -> Callable[[F], F]:
    """`--now TIME` (`--now-ms` a hidden alias), given to the command as `now_ms`."""
    return time_option("--now", "now_ms", help, old_names=("--now-ms",))


def lateness_option(help: str = LATENESS_HELP) -> Callable[[F], F]:
    """`--lateness-ms MS`: the allowed lateness (a duration, not a moment)."""
    return click.option("--lateness-ms", "lateness_ms", type=click.IntRange(min=0),
                        default=None, help=help)


def log_options(events_help: str = EVENTS_HELP, *, now_help: str = NOW_HELP,
                lateness_help: str = LATENESS_HELP) -> Callable[[F], F]:
    """`--events FILE --lateness-ms MS --now TIME`: a log read as the stream reads it."""
    def decorate(fn: F) -> F:
        fn = now_option(now_help)(fn)
        fn = lateness_option(lateness_help)(fn)
        return events_option(events_help)(fn)
    return decorate


def model_option(help: str = MODEL_HELP, *, required: bool = False,
                 old: str | None = None) -> Callable[[F], F]:
    """`--model V`, given to the command as `version` (`old`: its old positional)."""
    return _with_old(click.option("--model", "version", cls=Option, required=required,
                                  metavar="V", help=help, old_argument=_old_name(old)), old)


def _model_dir(ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path:
    if value is not None:
        return value
    group = ctx.meta.get(GROUP_MODEL_DIR)
    if group is not None:
        return group  # type: ignore[no-any-return]
    from app.settings import load_settings

    return load_settings().model_dir


def model_dir_option(old_names: Sequence[str] = ()) -> Callable[[F], F]:
    """`--model-dir DIR`, given to the command resolved (FRAUDSTREAM_MODEL_DIR by default)."""
    return click.option("--model-dir", *old_names, "model_dir", cls=Option, type=MODEL_DIR,
                        default=None, callback=_model_dir, old_names=old_names,
                        help="Model directory [default: FRAUDSTREAM_MODEL_DIR].")
