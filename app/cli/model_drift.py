"""`fraudstream model reference|drift`: a model's drift reference, and a log's drift offline."""

from __future__ import annotations

import math
import time
from pathlib import Path

import click

from app.settings import load_settings

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command("reference")
@click.argument("version")
@click.option("--events", required=True, type=_FILE,
              help="The transaction log VERSION was trained on (.jsonl or .parquet).")
@click.option("--labels", required=True, type=_FILE, help="Its labels JSONL.")
@click.option("--lateness-ms", type=click.IntRange(min=0), default=None,
              help="Allowed lateness L [default: the card's, else FRAUDSTREAM_ALLOWED_LATENESS_MS].")
@click.option("--now-ms", type=int, default=None,
              help="Validator clock [default: the card's created_from.now_ms, else the wall "
                   "clock].")
@click.pass_obj
def reference(model_dir: Path, version: str, events: Path, labels: Path,
              lateness_ms: int | None, now_ms: int | None) -> None:
    """Compute VERSION's drift reference from its training set and save it in its card.

    The training table is rebuilt as `train` built it (its fingerprint must be the card's);
    the card's split picks the training rows. The model file is not changed.
    """
    from app.drift.offline import reference_of_training_set
    from app.drift.reference import CARD_KEY
    from app.features.offline import compute_features
    from app.features.training_set import build_training_set, read_labels
    from app.scoring.contract import ModelError
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
@click.argument("version", required=False)
@click.option("--events", required=True, type=_FILE, help="Transaction log in log order.")
@click.option("--until", "until", default=None,
              help="Only events before this event time (ISO or ms), like a worker that has "
                   "served the log up to there.")
@click.option("--lateness-ms", type=click.IntRange(min=0), default=None,
              help="Allowed lateness L [default: FRAUDSTREAM_ALLOWED_LATENESS_MS].")
@click.option("--now-ms", type=int, default=None,
              help="Validator clock in ms since epoch [default: the wall clock].")
@click.pass_obj
def drift(model_dir: Path, version: str | None, events: Path, until: str | None,
          lateness_ms: int | None, now_ms: int | None) -> None:
    """PSI of every feature and the score over the 1 h and 24 h windows at the end of a log,
    against VERSION's reference (default: DEFAULT), exactly as a worker that served it."""
    from app.datagen.config import parse_time_ms
    from app.drift.offline import drift_of_features
    from app.drift.psi import level
    from app.drift.reference import DriftReference
    from app.features.offline import compute_features
    from app.scoring.contract import ModelError
    from app.scoring.oracle import score_table
    from app.scoring.registry import ModelRegistry

    settings = load_settings()
    try:
        loaded = ModelRegistry(model_dir, device="cpu").load(version)
        ref = DriftReference.of_card(loaded.card.raw, loaded.version)
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        until_ms = None if until is None else parse_time_ms(until)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--until") from None
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
