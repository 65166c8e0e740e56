"""`fraudstream features | training-set | audit-skew`: the offline feature evaluator's commands."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
import orjson

from app.cli.options import OUTPUT_FILE, labels_option, log_options, time_option
from app.settings import load_settings

if TYPE_CHECKING:
    import pyarrow as pa

    from app.features.merchant import MerchantTable
    from app.features.offline import OfflineResult

_EVENTS_HELP = "Transaction log in log order: .jsonl (one message per line) or .parquet."


@contextmanager
def progress_bar(events: Path) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr over the log (rows of Parquet, bytes of JSONL)."""
    total = _log_size(events)
    # only on a terminal: a redirected stderr keeps just what a person must read (errors)
    with click.progressbar(length=total, label="features", file=sys.stderr,
                           show_eta=True, show_percent=True,
                           hidden=not sys.stderr.isatty()) as bar:
        yield bar.update


def _log_size(events: Path) -> int:
    if events.suffix == ".parquet":
        from app.transactions.logfile import parquet_rows

        return parquet_rows(events)
    return events.stat().st_size


def _check_log(events: Path) -> None:
    if events.suffix not in (".parquet", ".jsonl", ".ndjson", ".json"):
        raise click.BadParameter(f"{events}: unknown log format {events.suffix!r} "
                                 "(expected .jsonl or .parquet)", param_hint="--events")


def merchant_table(labels: Path | None) -> MerchantTable | None:
    """The label file's merchant features (None without one), a bad row a usage error."""
    if labels is None:
        return None
    from app.features.merchant import MerchantTable
    from app.transactions.labelfile import read_label_records

    try:
        return MerchantTable.of(read_label_records(labels))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--labels") from None


def _run_offline(
    events: Path, lateness_ms: int | None, now_ms: int | None, out: Path | None = None,
    labels: Path | None = None, extra: tuple[str, ...] = (),
) -> tuple[OfflineResult, float]:
    """Features of the log (streamed to `out` when given, else kept in the result's table);
    the merchant features from `labels` (none: as without any label)."""
    from app.features.offline import compute_features, write_features

    merchants = merchant_table(labels)
    settings = load_settings()
    lateness = settings.allowed_lateness_ms if lateness_ms is None else lateness_ms
    now = int(time.time() * 1000) if now_ms is None else now_ms
    _check_log(events)
    t0 = time.perf_counter()
    with progress_bar(events) as progress:
        if out is None:
            result = compute_features(events, allowed_lateness_ms=lateness, now_ms=now,
                                      max_bytes=settings.max_message_bytes, progress=progress,
                                      merchants=merchants, extra=extra)
        else:
            try:
                result = write_features(events, out, allowed_lateness_ms=lateness, now_ms=now,
                                        max_bytes=settings.max_message_bytes, progress=progress,
                                        merchants=merchants)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--out") from None
    return result, time.perf_counter() - t0


def _write(table: pa.Table, out: Path) -> None:
    from app.features.offline import write_table

    try:
        write_table(table, out)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--out") from None


@click.command("features")
@log_options(_EVENTS_HELP)
@click.option("--out", required=True, type=OUTPUT_FILE, help="Output: .parquet or .jsonl.")
def features(events: Path, lateness_ms: int | None, now_ms: int | None, out: Path) -> None:
    """One row of features per accepted transaction, in log order (txn_id, card_id, ts_ms, ...).

    Streamed: memory is one batch plus the cards' states, whatever the log's length.
    """
    result, seconds = _run_offline(events, lateness_ms, now_ms, out)
    rate = result.lines / seconds if seconds > 0 else float("inf")
    click.echo(result.summary())
    click.echo(f"{result.lines} events in {seconds:.2f}s ({rate:,.0f} events/s) -> {out}")


@click.command("training-set")
@log_options(_EVENTS_HELP)
@labels_option('JSONL of {"txn_id", "label", "label_ts_ms"} or label rows as `fraudstream '
               'labels` reads them (those naming merchant_id and ts_ms feed the merchant '
               'features).', required=True)
@click.option("--out", required=True, type=OUTPUT_FILE, help="Output: .parquet or .jsonl.")
@time_option("--as-of", "as_of", "Use only labels known by then (label_ts_ms <= AS_OF).")
def training_set(events: Path, lateness_ms: int | None, now_ms: int | None, labels: Path,
                 out: Path, as_of: int | None) -> None:
    """Labels joined point-in-time to the features their transaction was served."""
    from app.features.training_set import build_training_set, read_labels

    result, _ = _run_offline(events, lateness_ms, now_ms, labels=labels)
    try:
        ts = build_training_set(result, read_labels(labels), as_of_ms=as_of)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--labels") from None
    _write(ts.table, out)
    click.echo(result.summary())
    unmatched = " ".join(f"{k}={v}" for k, v in ts.unmatched.items())
    click.echo(f"labels joined={ts.joined} after_as_of={ts.after_as_of} "
               f"not_joined={ts.unmatched_total} ({unmatched}) -> {out}")


def _served_rows(source: str) -> Iterator[object]:
    path = Path(source)
    if path.is_file():
        with path.open("rb") as fh:
            for line in fh:
                if line.strip():
                    try:
                        yield orjson.loads(line)
                    except orjson.JSONDecodeError:
                        yield line  # counted as an invalid served row
        return
    from app.stream.engine.served import iter_served_rows

    yield from iter_served_rows(load_settings(), source)  # bytes: not a served row (invalid)


@click.command("audit-skew")
@click.option("--served", required=True,
              help="Served rows: a JSONL file, or else the name of a Kafka topic to read.")
@log_options(_EVENTS_HELP)
@click.option("--examples", type=click.IntRange(min=0), default=3, show_default=True,
              help="Mismatch examples shown per feature.")
@labels_option("The label log the workers read (JSONL or Parquet label rows): the merchant "
               "features are recomputed from it (without: as without any label).")
def audit_skew(served: str, events: Path, lateness_ms: int | None, now_ms: int | None,
               examples: int, labels: Path | None) -> None:
    """Recompute features offline and compare every served vector bit for bit (exit 1 on skew)."""
    from app.features.audit import audit

    result, _ = _run_offline(events, lateness_ms, now_ms, labels=labels,
                             extra=("merchant_id",) if labels is not None else ())
    book = None
    if labels is not None:
        from app.features.merchant import MerchantBook
        from app.transactions.labelfile import read_label_records

        book = MerchantBook()
        for rec in read_label_records(labels):
            book.add(rec)
    report = audit(_served_rows(served), result.table, labels=book)
    click.echo(result.summary())
    click.echo(report.render(examples=examples))
    if not report.ok:
        raise SystemExit(1)
