"""`fraudstream labels --labels FILE`: ingest chargebacks and confirmed fraud into the `labels`
topic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from app.cli.options import labels_option


@click.command()
@labels_option("Label rows: JSONL or Parquet.", required=True, old="file", dest="labels_path")
@click.option("--source", default="import", show_default=True,
              help="Source recorded on rows that name none (e.g. chargeback).")
def labels(labels_path: Path, source: str) -> None:
    """Send a file's labels (JSONL or Parquet rows: txn_id and/or card_id, label 0/1,
    reported_at as ms since epoch or ISO 8601 with offset, optional source) to the `labels`
    topic; rows that are not valid go to `labels.dlq` with the reason. Exit status 1 when any
    row was refused (the valid ones are sent all the same)."""
    from app.kafka.labelimport import send_labels
    from app.settings import load_settings
    from app.transactions.labels import LabelError, parse_label_row
    from app.transactions.logfile import LogFileError

    try:
        parse_label_row({"txn_id": "x", "label": 1, "reported_at": 10**12, "source": source},
                        now_ms=10**12)
    except LabelError as exc:
        raise click.BadParameter(exc.reason.replace("source: ", ""), param_hint="--source") from None
    try:
        report = asyncio.run(send_labels(load_settings(), labels_path, source=source))
    except LogFileError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(report.summary(), err=True)
    if report.rejected:
        sys.exit(1)
