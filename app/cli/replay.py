"""`fraudstream replay --events FILE`: produce a JSONL or Parquet log into the transactions
topic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from app.cli.options import events_option
from app.kafka.replay import replay_messages
from app.settings import load_settings
from app.transactions.logfile import iter_messages

console = Console(stderr=True)


@click.command()
@events_option("Transaction log (JSONL: one message per line; or Parquet).", old="file")
@click.option("--rate", type=float, default=None, help="Messages per second (default: --max).")
@click.option("--max", "as_fast", is_flag=True, help="As fast as the broker takes them.")
@click.option("--topic", default=None, help="Target topic (default: the transactions topic).")
def replay(events: Path, rate: float | None, as_fast: bool, topic: str | None) -> None:
    """Replay the log in file order, keyed by card_id."""
    if rate is not None and as_fast:
        raise click.UsageError("--rate and --max are exclusive")
    settings = load_settings()
    total = sum(1 for _ in iter_messages(events))
    with Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]:>9.0f} msg/s"), TimeRemainingColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("replay", total=total, rate=0.0)

        def advance(done: int) -> None:
            elapsed = progress.tasks[0].elapsed or 1e-9
            progress.update(task, completed=done, rate=done / elapsed)

        report = asyncio.run(replay_messages(settings, iter_messages(events), rate=rate,
                                             topic=topic, on_progress=advance))
    console.print(f"sent {report.sent} messages in {report.seconds:.1f}s "
                  f"({report.rate:,.0f} msg/s), errors: {report.errors}")
    if report.errors:
        sys.exit(1)
