"""README.md stays a front page: short, each command once, dated figures only in one table."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"

MAX_LINES = 180
#: The figures table's header: one row per figure, its latest number, its date and command.
FIGURES_HEADER = "| figure | latest | date | command |"
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]*(?:\\\|[a-z][a-z0-9-]*)*")


def section(text: str, heading: str) -> list[str]:
    """The lines under `## heading` up to the next `## ` heading."""
    lines = text.splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def table_rows(lines: list[str]) -> list[list[str]]:
    """The cells of every table row below a header and its `|---|` line."""
    rows = [line for line in lines if line.startswith("|")]
    return [split_row(row) for row in rows[2:]]


def split_row(row: str) -> list[str]:
    """A table row's cells; `\\|` inside a cell is not a separator."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def command_names(cell: str) -> list[str]:
    """The commands a commands-table cell documents: `stack up \\| down` is `stack up` and
    `stack down`; `model train --events` is `model train`; `replay --events FILE` is `replay`."""
    names = []
    for span in re.findall(r"`([^`]+)`", cell):
        words = span.split()
        if not words:
            continue
        head, rest = words[0], words[1:]
        subs: list[str] = []
        while rest and _SUBCOMMAND.fullmatch(rest[0]):
            subs.extend(rest.pop(0).split("\\|"))
            if rest and rest[0] == "\\|":
                rest.pop(0)
                continue
            break
        names.extend([f"{head} {s}" for s in subs] or [head])
    return names


def test_the_readme_is_at_most_180_lines() -> None:
    count = len(README.read_text().splitlines())
    assert count <= MAX_LINES, f"README.md has {count} lines, at most {MAX_LINES}: move detail to docs/"


def test_each_command_appears_once_in_the_commands_table() -> None:
    rows = table_rows(section(README.read_text(), "Commands"))
    assert rows, "README.md's Commands section has no table"
    counts = Counter(name for row in rows for name in command_names(row[0]))
    twice = sorted(name for name, n in counts.items() if n > 1)
    assert not twice, f"commands in more than one row of README.md's table: {twice}"


def test_dates_appear_only_in_the_figures_table() -> None:
    text = README.read_text()
    figures = section(text, "Figures")
    assert figures.count(FIGURES_HEADER) == 1, "README.md needs one figures table"
    rows = table_rows(figures)
    for row in rows:
        assert len(row) == 4 and _DATE.search(row[2]) and "`" in row[3], (
            f"a figure row needs its latest number, date and command: {row}")
    in_table = {line for line in figures if line.startswith("|")}
    dated = [line for line in text.splitlines() if _DATE.search(line) and line not in in_table]
    assert not dated, "dated narration outside README.md's figures table:\n" + "\n".join(dated)


def test_command_names_reads_groups_alternatives_and_arguments() -> None:
    assert command_names(r"`stack up \| down \| env [--profile single\|cluster]`") == [
        "stack up", "stack down", "stack env"]
    assert command_names(r"`rules add ID EXPR`, `rules edit\|disable`") == [
        "rules add", "rules edit", "rules disable"]
    assert command_names(r"`lists add allow\|block card\|merchant ID`") == ["lists add"]
    assert command_names("`replay --events FILE [--rate R]`, `chaos [SCENARIO]`") == [
        "replay", "chaos"]
    assert command_names("`worker [--web-port P]`, `dispatcher`") == ["worker", "dispatcher"]

def test_each_figure_runs_a_benchmark_module_that_exists() -> None:
    """A figure's benchmark command is `python -m benchmarks.NAME` (the scripts import each other,
    so a path does not run) and NAME is a script in benchmarks/."""
    root = README.parent
    commands = [span for row in table_rows(section(README.read_text(), "Figures"))
                for span in re.findall(r"`([^`]+)`", row[3])]
    by_path = [c for c in commands if re.search(r"(^|\s)benchmarks/\w+\.py", c)]
    assert not by_path, f"figure commands that run a benchmark by path: {by_path}"
    modules = [m for c in commands for m in re.findall(r"-m benchmarks\.(\w+)", c)]
    assert modules, "no figure runs a benchmark"
    missing = [m for m in modules if not (root / "benchmarks" / f"{m}.py").is_file()]
    assert not missing, f"figure commands naming no script in benchmarks/: {missing}"
