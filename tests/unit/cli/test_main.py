"""The `fraudstream` group: a command whose module fails to load is an error naming it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from app.cli import main
from app.cli.main import cli


@pytest.mark.parametrize("target", [
    "app.cli.no_such_module:command",  # the module is missing (once "No such command")
    "app.cli.options:no_such_command",  # the module loads, the command is not in it
])
def test_a_command_that_fails_to_load_is_an_error_naming_it(
        monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    monkeypatch.setitem(main.COMMANDS, "broken", target)
    result = CliRunner().invoke(cli, ["broken", "--events", "x.jsonl"])
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: the `broken` command could not be "
                                                   f"loaded ({target}): "), lines
    assert "No such command" not in result.output
    # its --help says so too, and the listing names it instead of failing as a whole
    assert CliRunner().invoke(cli, ["broken", "--help"]).exit_code == 1
    listing = CliRunner().invoke(cli, ["--help"])
    assert listing.exit_code == 0 and "broken" in listing.output
    assert "could not be loaded" in listing.output


def test_verbose_shows_why_it_failed_to_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(main.COMMANDS, "broken", "app.cli.no_such_module:command")
    result = CliRunner().invoke(cli, ["-v", "broken"])
    assert result.exit_code == 1 and isinstance(result.exception, ModuleNotFoundError)


def test_an_unknown_name_is_still_no_such_command() -> None:
    result = CliRunner().invoke(cli, ["no-such-thing"])
    assert result.exit_code == 2 and "No such command 'no-such-thing'" in result.output
