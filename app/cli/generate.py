"""`fraudstream generate`: write a labelled transaction log (synthetic, or the Handbook's)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click
from click.core import ParameterSource

from app.cli.errors import require_parent_dir
from app.cli.options import OUTPUT_FILE, now_option, time_option
from app.datagen.config import DEFAULT_START_MS, MAX_DAYS, GeneratorConfig
from app.datagen.generator import generate_log
from app.datagen.log import LogCounts
from app.datagen.writer import output_format, write_chunks, write_log
from app.settings import load_settings

if TYPE_CHECKING:
    import pyarrow as pa

    from app.datagen.handbook import HandbookDataset

log = logging.getLogger(__name__)


_FRACTION = click.FloatRange(0.0, 1.0)
Profile = Literal["synthetic", "handbook"]
#: options only the synthetic profile reads; given with --profile handbook they are refused
_SYNTHETIC_ONLY = ("cards", "txns", "seed", "start", "out_of_order", "redelivery", "malformed",
                   "fraud_rate", "merchants", "now_ms", "drift_spec")
_HANDBOOK_ONLY = ("customers", "terminals")


@click.command(context_settings={"max_content_width": 120})
@click.option("--profile", type=click.Choice(["synthetic", "handbook"]), default="synthetic",
              show_default=True,
              help="synthetic: fraudstream's own generator. handbook: the Fraud Detection "
                   "Handbook's simulated dataset (5,000 customers, 10,000 terminals, 183 days "
                   "from 2018-04-01), JSONL only, takes --out, --labels, --days, --customers, "
                   "--terminals and refuses the synthetic-only options; also writes OUT's stem "
                   "+ .scenarios.parquet (txn_id, scenario).")
@click.option("--customers", type=click.IntRange(min=1), default=None,
              help="handbook: number of customers (cards) [default: 5000].")
@click.option("--terminals", type=click.IntRange(min=1), default=None,
              help="handbook: number of terminals (merchants) [default: 10000].")
@click.option("--cards", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Number of cards.")
@click.option("--txns", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Number of distinct transactions (redeliveries and bad messages come on top).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Random seed: same arguments and seed give byte-identical files.")
@click.option("--out", type=OUTPUT_FILE, required=True,
              help="Transactions file: Parquet if it ends in .parquet, else JSONL.")
@click.option("--labels", type=OUTPUT_FILE, default=None,
              help="Labels JSONL file {txn_id, label, label_ts_ms} (handbook: a label row "
                   "per transaction, reported 7 days after it) [default: OUT's stem + "
                   ".labels.jsonl].")
@time_option("--start", "start", "First event time [default: 2026-01-01T00:00:00Z].",
             default=DEFAULT_START_MS)
@click.option("--days", type=click.IntRange(min=1, max=MAX_DAYS), default=14, show_default=True,
              help="Days of event time the log covers [handbook default: 183].")
@click.option("--out-of-order", type=_FRACTION, default=0.0, show_default=True,
              help="Fraction of events displaced in file order; ~10% of them beyond the "
                   "allowed lateness (genuinely late), the rest within it.")
@click.option("--redelivery", type=_FRACTION, default=0.0, show_default=True,
              help="Fraction of transactions emitted a second time, byte-identical, a little "
                   "later (an upstream retry).")
@click.option("--malformed", type=_FRACTION, default=0.0, show_default=True,
              help="Bad messages added from the corpus, as a fraction of --txns (JSONL only).")
@click.option("--fraud-rate", type=click.FloatRange(0.0, 0.5), default=0.015, show_default=True,
              help="Share of transactions that are fraud (approximate: incidents are whole).")
@click.option("--merchants", type=click.IntRange(min=1), default=None,
              help="Merchant population [default: sized from --cards].")
@now_option("Validator clock the bad messages are built against (far-future event times) "
            "[default: end of data + 1 day].")
@click.option("--drift", "drift_spec", default=None, metavar="SPEC",
              help="Drift from a point in event time: comma-separated KEY=VALUE, from=TIME, "
                   "amount=xF (amounts scaled), country=CC:SHARE (a new country mix), "
                   "fraud-rate=R (extra fraud incidents), e.g. from=2026-01-03,amount=x3.")
@click.pass_context
def generate(
    ctx: click.Context, profile: Profile, customers: int | None, terminals: int | None,
    cards: int, txns: int, seed: int, out: Path, labels: Path | None, start: int, days: int,
    out_of_order: float, redelivery: float, malformed: float, fraud_rate: float,
    merchants: int | None, now_ms: int | None, drift_spec: str | None,
) -> None:
    """Generate a synthetic card-transaction log with labelled fraud patterns, or with
    --profile handbook the Fraud Detection Handbook's simulated dataset (docs/handbook.md).

    Every valid line passes the transaction contract at a clock of end of data + 1 day.
    A JSONL file holds one message per line: bad messages are raw bytes (never containing a
    line break), so read it in binary and split on b"\\n" only.
    """
    given = {name for name in (*_SYNTHETIC_ONLY, *_HANDBOOK_ONLY)
             if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT}
    if profile == "handbook":
        if given & set(_SYNTHETIC_ONLY):
            raise click.UsageError(f"--profile handbook does not take "
                                   f"{_flags(given & set(_SYNTHETIC_ONLY))}: it "
                                   "generates the book's dataset with the book's seeds")
        if ctx.get_parameter_source("days") is ParameterSource.DEFAULT:
            days = 183
        _generate_handbook(out, labels, days, customers, terminals)
        return
    if given & set(_HANDBOOK_ONLY):
        raise click.UsageError(f"{_flags(given & set(_HANDBOOK_ONLY))}: only with --profile "
                               "handbook")
    if output_format(out) == "parquet" and malformed > 0:
        raise click.BadParameter(
            "Parquet cannot hold malformed messages; use a .jsonl output or --malformed 0",
            param_hint="--malformed",
        )
    drift = None
    if drift_spec is not None:
        from app.datagen.drift import DriftSpecError, parse_drift_spec

        try:
            drift = parse_drift_spec(drift_spec)
        except DriftSpecError as exc:
            raise click.BadParameter(str(exc), param_hint="--drift") from None
    require_parent_dir(out, "--out")
    require_parent_dir(labels, "--labels")
    settings = load_settings()
    try:
        config = GeneratorConfig(
            cards=cards, txns=txns, seed=seed, start_ms=start, days=days,
            out_of_order=out_of_order, redelivery=redelivery, malformed=malformed,
            fraud_rate=fraud_rate, merchants=merchants,
            allowed_lateness_ms=settings.allowed_lateness_ms,
            max_message_bytes=settings.max_message_bytes, now_ms=now_ms, drift=drift,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    labels_path = labels or out.with_name(f"{out.stem}.labels.jsonl")
    if labels_path.resolve() == out.resolve():
        raise click.BadParameter("must differ from --out", param_hint="--labels")

    began = time.perf_counter()
    try:
        generated = generate_log(config)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    write_log(generated, out, labels_path)
    elapsed = time.perf_counter() - began
    log.info("wrote %d lines to %s and labels to %s", len(generated), out, labels_path)
    _print_summary(generated.counts, out, labels_path, elapsed)


def _print_summary(counts: LogCounts, out: Path, labels: Path, elapsed: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fraudstream generate", show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    rows: list[tuple[str, int]] = [
        ("lines", counts.lines),
        ("valid transactions (distinct)", counts.transactions),
        ("redelivered copies", counts.redelivered),
        ("malformed messages", counts.malformed),
        ("displaced events", counts.displaced),
        ("late events (beyond allowed lateness)", counts.late),
        ("fraud, all patterns", counts.fraud),
        *((f"  fraud: {name}", n) for name, n in counts.fraud_by_pattern.items()),
    ]
    for what, n in rows:
        table.add_row(what, f"{n:,}")
    rate = counts.lines / elapsed if elapsed > 0 else float("inf")
    table.add_row("elapsed (s)", f"{elapsed:.2f}")
    table.add_row("rate (events/s, all lines)", f"{rate:,.0f}")
    console = Console()
    console.print(table)
    console.print(f"transactions: {out}\nlabels:       {labels}")


def _flags(names: set[str]) -> str:
    options = {"now_ms": "now", "drift_spec": "drift"}
    return ", ".join(f"--{options.get(n, n).replace('_', '-')}" for n in sorted(names))


def _generate_handbook(out: Path, labels: Path | None, days: int, customers: int | None,
                       terminals: int | None) -> None:
    from app.datagen import handbook

    if output_format(out) == "parquet":
        raise click.BadParameter("the handbook profile writes JSONL", param_hint="--out")
    labels_path = labels or out.with_name(f"{out.stem}.labels.jsonl")
    scenarios_path = out.with_name(f"{out.stem}.scenarios.parquet")
    if labels_path.resolve() == out.resolve():
        raise click.BadParameter("must differ from --out", param_hint="--labels")
    if scenarios_path.resolve() in (out.resolve(), labels_path.resolve()):
        raise click.BadParameter(f"{scenarios_path} is the scenarios file; choose another name",
                                 param_hint="--out")
    require_parent_dir(out, "--out")
    require_parent_dir(labels, "--labels")
    began = time.perf_counter()
    dataset = handbook.generate_handbook(
        n_customers=customers or handbook.N_CUSTOMERS,
        n_terminals=terminals or handbook.N_TERMINALS, nb_days=days)
    write_chunks(out, handbook.transaction_chunks(dataset))
    write_chunks(labels_path, handbook.label_chunks(dataset))
    _write_scenarios(handbook.scenario_table(dataset), scenarios_path)
    elapsed = time.perf_counter() - began
    log.info("wrote %d handbook transactions to %s", len(dataset), out)
    click.echo(_handbook_summary(dataset, elapsed))
    click.echo(f"transactions: {out}\nlabels:       {labels_path}\nscenarios:    "
               f"{scenarios_path}")


def _handbook_summary(dataset: HandbookDataset, elapsed: float) -> str:
    n, frauds = len(dataset), dataset.frauds
    rate = 100 * frauds / n if n else 0.0
    per = " / ".join(f"{c:,}" for c in dataset.scenario_counts().values())
    return (f"handbook: {n:,} transactions, {frauds:,} frauds ({rate:.4f} %), scenarios 1 / 2 "
            f"/ 3: {per}, in {elapsed:.1f} s")


def _write_scenarios(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
