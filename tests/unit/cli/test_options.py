"""One set of options over the whole CLI: every command and subcommand is walked, and a log, a
moment, a model and a model directory are spelled and typed the same everywhere."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from app.cli.main import ALIASES, COMMANDS, cli
from app.cli.options import (
    INPUT_FILE,
    MODEL_DIR,
    OUTPUT_FILE,
    TIME,
    OldArgument,
    Option,
    events_option,
    now_option,
)
from app.settings import SHIPPED_MODEL_DIR

#: The same moment, as ISO 8601 and as ms since epoch.
MOMENTS = ("2018-08-08T00:00:00Z", "1533686400000")
MOMENT_MS = 1_533_686_400_000
#: Names that say an option is a moment (its dest, or one of its flags without dashes).
MOMENT_NAME = re.compile(r"^(now|as_of|until|start|since|from|at)(_ms)?$")
#: Options in ms that are durations, not moments.
DURATIONS_MS = {"lateness_ms"}


def _walk() -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(cli, info_name="fraudstream")

    def walk(path: str, command: click.Command | None) -> Iterator[tuple[str, click.Command]]:
        assert command is not None, path
        yield path, command
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                yield from walk(f"{path} {name}", command.get_command(ctx, name))

    for name in (*COMMANDS, *ALIASES):
        yield from walk(name, cli.get_command(ctx, name))


COMMAND_TREE = list(_walk())
#: (command path, parameter) of every parameter of every command
PARAMS = [(path, p) for path, cmd in COMMAND_TREE for p in cmd.params]


def test_every_command_loads() -> None:
    broken = [path for path, cmd in COMMAND_TREE if "could not be loaded" in (cmd.help or "")]
    assert not broken
    assert {"model train", "stack status", "secure-stack status", "train"} <= {
        path for path, _ in COMMAND_TREE}


def _takes_a_log(param: click.Parameter) -> bool:
    text = getattr(param, "help", None) or ""
    return isinstance(param.type, click.Path) and (
        param.name in ("events", "file", "log", "txns") or "transaction log" in text.lower())


def test_a_transaction_log_is_always_events() -> None:
    wrong, logs = [], []
    for where, param in PARAMS:
        if isinstance(param, OldArgument):
            continue  # an old positional: parsed, shown nowhere, its value given to the option
        if isinstance(param, click.Argument) and isinstance(param.type, click.Path):
            wrong.append(f"{where}: positional {param.name} (an input file is an option)")
        if _takes_a_log(param):
            logs.append(where)
            if not (isinstance(param, click.Option) and param.opts == ["--events"]
                    and param.type is INPUT_FILE):
                wrong.append(f"{where}: {param.opts} reads a log (it is --events FILE)")
    assert not wrong, "\n".join(wrong)
    assert {"score", "backtest", "replay", "features", "model train", "model drift"} <= {
        where for where in logs}


def test_files_directories_and_models_use_the_shared_options() -> None:
    wrong = []
    for where, param in PARAMS:
        if isinstance(param.type, click.Path) and param.type not in (
                INPUT_FILE, OUTPUT_FILE, MODEL_DIR):
            wrong.append(f"{where}: {param.name} has its own click.Path")
        if param.name == "model_dir" and not (param.type is MODEL_DIR
                                              and "--model-dir" in param.opts):
            wrong.append(f"{where}: a model directory is --model-dir")
        if param.name == "version" and isinstance(param, click.Option) and (
                param.opts != ["--model"]):
            wrong.append(f"{where}: a model is --model V")
    assert not wrong, "\n".join(wrong)


def _is_moment(param: click.Parameter) -> bool:
    flags = [o.lstrip("-").replace("-", "_") for o in param.opts]
    return any(MOMENT_NAME.match(n) for n in (param.name or "", *flags))


def test_every_moment_takes_iso_and_ms() -> None:
    wrong, moments = [], []
    ctx = click.Context(cli)
    for where, param in PARAMS:
        name = param.name or ""
        if name.endswith("_ms") and name not in DURATIONS_MS and param.type is not TIME:
            wrong.append(f"{where}: {name} is a time in ms, so a TIME option")
        if not (_is_moment(param) or param.type is TIME):
            continue
        moments.append(f"{where} {param.opts[0]}")
        if not (param.type is TIME and isinstance(param, click.Option)):
            wrong.append(f"{where}: {param.opts} is a moment, so a TIME option")
            continue
        for text in MOMENTS:
            if param.type_cast_value(ctx, text) != MOMENT_MS:
                wrong.append(f"{where}: {param.opts[0]} {text}")
        if "TIME: ISO 8601" not in (param.help or ""):
            wrong.append(f"{where}: {param.opts[0]}'s help does not say the forms")
    assert not wrong, "\n".join(wrong)
    assert {"score --now", "training-set --as-of", "model drift --until", "generate --start",
            "generate --now"} <= set(moments)


def test_a_command_line_takes_both_forms_and_the_old_name() -> None:
    @click.command()
    @now_option()
    def probe(now_ms: int | None) -> None:
        click.echo(now_ms)

    runner = CliRunner()
    for argv in (["--now", MOMENTS[0]], ["--now", MOMENTS[1]], ["--now-ms", MOMENTS[1]]):
        result = runner.invoke(probe, argv)
        assert result.exit_code == 0 and result.output == f"{MOMENT_MS}\n", (argv, result.output)
    bad = runner.invoke(probe, ["--now", "yesterday"])
    assert bad.exit_code == 2 and "'--now'" in bad.output and "ISO" in bad.output
    shown = runner.invoke(probe, ["--help"]).output
    assert "--now TIME" in shown and "--now-ms" not in shown


def test_an_old_positional_still_works_and_is_shown_nowhere(tmp_path: Path) -> None:
    @click.command()
    @events_option(old="file")
    def probe(events: Path) -> None:
        click.echo(events.name)

    log = tmp_path / "txns.jsonl"
    log.write_text("")
    runner = CliRunner()
    assert runner.invoke(probe, [str(log)]).output == "txns.jsonl\n"
    assert runner.invoke(probe, ["--events", str(log)]).output == "txns.jsonl\n"
    assert runner.invoke(probe, [str(tmp_path / "missing")]).exit_code == 2  # still checked
    both = runner.invoke(probe, ["--events", str(log), str(tmp_path / "other.jsonl")])
    assert both.exit_code == 2 and "give it once" in both.output
    missing = runner.invoke(probe, [])
    assert missing.exit_code == 2 and "Missing option '--events'" in missing.output
    shown = runner.invoke(probe, ["--help"]).output
    assert "Usage: probe [OPTIONS]\n" in shown and "FILE" in shown and "[FILE]" not in shown


@pytest.mark.parametrize("argv", [
    ["model", "validate", "--model", "{v}", "--model-dir", "{d}"],
    ["model", "validate", "{v}", "--model-dir", "{d}"],  # the old positional VERSION
    ["model", "--model-dir", "{d}", "validate", "--model", "{v}"],  # the group's old option
])
def test_a_model_is_model_v_with_one_model_dir(argv: list[str]) -> None:
    version = (SHIPPED_MODEL_DIR / "DEFAULT").read_text().strip()
    args = [a.format(v=version, d=SHIPPED_MODEL_DIR) for a in argv]
    result = CliRunner().invoke(cli, [*args, "--device", "cpu"])
    assert result.exit_code == 0 and f"OK {version}" in result.output, result.output


def test_old_names_run_but_are_not_listed() -> None:
    ctx = click.Context(cli)
    model = cli.get_command(ctx, "model")
    assert isinstance(model, click.Group)
    assert cli.get_command(ctx, "train") is model.get_command(ctx, "train")
    listed = CliRunner().invoke(cli, ["--help"]).output
    assert not re.search(r"^\s+(train|secure-stack)\s", listed, re.MULTILINE)
    assert re.search(r"^\s+model\s", listed, re.MULTILINE)
    hidden = [p for _, cmd in COMMAND_TREE for p in cmd.params
              if isinstance(p, Option) and p.old_names]
    assert {o for p in hidden for o in p.old_names} >= {"--now-ms", "--out"}
