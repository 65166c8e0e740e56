"""`fraudstream model reference|drift`: a model's drift reference, and a log's drift offline."""

from __future__ import annotations

import math
import time
from pathlib import Path

import click

from app.cli.options import (
    labels_option,
    log_options,
    model_dir_option,
    model_option,
    time_option,
)
from app.settings import load_settings


@click.command("reference")
@model_option("The model version whose reference is computed.", required=True, old="version")
@model_dir_option()
@log_options("The transaction log model V was trained on (.jsonl or .parquet).",
             lateness_help="Allowed lateness L in ms [default: the card's, else "
                           "FRAUDSTREAM_ALLOWED_LATENESS_MS].",
             now_help="Validator clock [default: the card's created_from.now_ms, else the wall "
                      "clock].")
@labels_option("Its labels JSONL.", required=True)
def reference(model_dir: Path, version: str, events: Path, labels: Path,
              lateness_ms: int | None, now_ms: int | None) -> None:
    """Compute model V's drift reference from its training set and save it in its card.

    The training table is rebuilt as `model train` built it (its fingerprint must be the card's);
    the card's split picks the training rows. The model file is not changed.
    """
    from app.drift.offline import reference_of_training_set
    from app.features.offline import compute_features
    from app.features.training_set import build_training_set, read_labels
    from app.scoring.contract import ModelError
    from app.scoring.drift_reference import CARD_KEY
    from app.scoring.registry import ModelRegistry
    from app.scoring.trainer import REFERENCE_SOURCE

    settings = load_settings()
    registry = ModelRegistry(model_dir, device="cpu")
    try:
        loaded = registry.load(version)
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    made = loaded.card.raw.get("created_from", {})
    lateness = (lateness_ms if lateness_ms is not None
                else made.get("allowed_lateness_ms", settings.allowed_lateness_ms))
    now = now_ms if now_ms is not None else made.get("now_ms", int(time.time() * 1000))
    offline = compute_features(events, allowed_lateness_ms=lateness, now_ms=now,
                               max_bytes=settings.max_message_bytes)
    try:
        joined = build_training_set(offline, read_labels(labels))
        ref = reference_of_training_set(loaded, joined.table, source=REFERENCE_SOURCE)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    card = {**loaded.card.raw, CARD_KEY: ref.to_json()}
    registry.add(version, (loaded.path / "model.onnx").read_bytes(), card)
    click.echo(f"reference of {version}: {ref.rows:,} training rows, "
               f"{sum(b.size for _, b in ref.series)} bins -> {loaded.path / 'card.json'}")


@click.command("drift")
@model_option(old="version")
@model_dir_option()
@log_options()
@time_option("--until", "until_ms", "Only events before this event time, like a worker that "
             "has served the log up to there.")
def drift(model_dir: Path, version: str | None, events: Path, until_ms: int | None,
          lateness_ms: int | None, now_ms: int | None) -> None:
    """PSI of every feature and the score over the 1 h and 24 h windows at the end of a log,
    against model V's reference (default: DEFAULT), exactly as a worker that served it."""
    from app.drift.offline import drift_of_features
    from app.drift.psi import level
    from app.features.offline import compute_features
    from app.scoring.contract import ModelError
    from app.scoring.drift_reference import DriftReference
    from app.scoring.oracle import score_table
    from app.scoring.registry import ModelRegistry

    settings = load_settings()
    try:
        loaded = ModelRegistry(model_dir, device="cpu").load(version)
        ref = DriftReference.of_card(loaded.card.raw, loaded.version)
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    offline = compute_features(
        events, allowed_lateness_ms=settings.allowed_lateness_ms if lateness_ms is None
        else lateness_ms, now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        max_bytes=settings.max_message_bytes)
    monitor = drift_of_features(loaded, ref, offline, score_table(loaded, offline),
                                until_ms=until_ms, min_events=settings.drift_min_events)
    watch, alert = settings.drift_psi_watch, settings.drift_psi_alert
    states = [monitor.state(w) for w in monitor.windows]
    click.echo(f"model {loaded.version}; PSI watch >= {watch}, alert >= {alert}; events: "
               + ", ".join(f"{s.window} {s.events:,}" for s in states))
    click.echo(f"{'series':<24}" + "".join(f"{s.window:>14}" for s in states))
    for name in monitor.names:
        cells = []
        for s in states:
            value = s.psi[name]
            text = "n/a" if math.isnan(value) else f"{value:.4f}"
            mark = {"alert": "!!", "watch": "! "}.get(level(value, watch=watch, alert=alert), "  ")
            cells.append(f"{text:>12}{mark}")
        click.echo(f"{name:<24}" + "".join(cells))
