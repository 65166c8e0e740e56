"""`fraudstream score`: the offline oracle, the actions a log must yield, as JSONL."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import click
import orjson

from app.cli.errors import require_parent_dir
from app.cli.options import (
    OUTPUT_FILE,
    labels_option,
    log_options,
    model_dir_option,
    model_option,
)
from app.settings import load_settings


def _write_jsonl(path: Path, lines: Iterable[bytes]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with tmp.open("wb") as fh:
            fh.writelines(line + b"\n" for line in lines)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@click.command("score", context_settings={"max_content_width": 120})
@log_options()
@click.option("--out", required=True, type=OUTPUT_FILE, help="Actions JSONL, one action per line.")
@model_option()
@model_dir_option()
@click.option("--served-out", type=OUTPUT_FILE, default=None,
              help="Also write every scored transaction (features, score, model_version) as "
              "features.served-shaped JSONL (audit-skew --served reads it).")
@click.option("--freeze", type=click.FloatRange(0.0, 1.0), default=None,
              help="Override the card's freeze threshold.")
@click.option("--alert", type=click.FloatRange(0.0, 1.0), default=None,
              help="Override the card's alert threshold.")
@labels_option("The label log the workers read (label rows as `fraudstream labels` reads "
               "them): the merchant features come from it (without: as without any label).")
def score(events: Path, lateness_ms: int | None, now_ms: int | None, out: Path,
          version: str | None, model_dir: Path, served_out: Path | None, freeze: float | None,
          alert: float | None, labels: Path | None) -> None:
    """Score a log offline (same features, model and policy as the worker) → actions JSONL.

    Accepted transactions are scored once, in log order, on CPU; malformed and late lines
    yield nothing, nor does a redelivery. decided_at_ms is the transaction's ts_ms.
    """
    from app.cli.features import merchant_table, progress_bar
    from app.scoring.contract import ModelError
    from app.scoring.oracle import run_oracle
    from app.scoring.registry import ModelRegistry

    for path, option in ((out, "--out"), (served_out, "--served-out")):
        require_parent_dir(path, option)
    settings = load_settings()
    registry = ModelRegistry(model_dir, device="cpu")
    try:
        loaded = registry.load(version)
        thresholds = loaded.thresholds.override(freeze=freeze, alert=alert)
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    began = time.perf_counter()
    if events.suffix not in (".parquet", ".jsonl", ".ndjson", ".json"):
        raise click.BadParameter(f"{events}: unknown log format {events.suffix!r}",
                                 param_hint="--events")
    with progress_bar(events) as progress:
        run = run_oracle(
            events, loaded, progress=progress, thresholds=thresholds,
            allowed_lateness_ms=settings.allowed_lateness_ms if lateness_ms is None
            else lateness_ms,
            now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
            max_bytes=settings.max_message_bytes, merchants=merchant_table(labels),
        )
    if run.offline.accepted == 0:
        raise click.ClickException(
            f"no valid transaction in {events} ({run.offline.summary()}): nothing scored, "
            f"{out} not written; is it a transaction log?")
    _write_jsonl(out, (a.to_json() for a in run.actions))
    if served_out is not None:
        _write_jsonl(served_out, (orjson.dumps(row) for row in run.served_rows()))
    elapsed = time.perf_counter() - began
    click.echo(f"model {run.model_version} on {loaded.scorer.active_provider}: freeze>="
               f"{thresholds.freeze:.6g} alert>={thresholds.alert:.6g}")
    click.echo(run.offline.summary())
    counts = " ".join(f"{kind}={n}" for kind, n in run.counts.items())
    click.echo(f"scored {run.offline.accepted} transactions -> {len(run.actions)} actions "
               f"({counts}); {len(run.boundary_txn_ids)} boundary decisions (|score - "
               f"threshold| <= 1e-5)")
    click.echo(f"took {elapsed:.1f}s -> {out}" + (f", {served_out}" if served_out else ""))
