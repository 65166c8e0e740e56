"""`fraudstream model train | list | validate | activate | reference | drift | shadow | compare`:
the model's commands (reference and drift in app.cli.model_drift, shadow and compare in
app.cli.model_shadow)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, cast

import click

from app.cli.options import (
    GROUP_MODEL_DIR,
    MODEL_DIR,
    labels_option,
    log_options,
    model_dir_option,
    model_option,
)
from app.settings import load_settings


def _file_id(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return {"file": path.name, "sha256": digest.hexdigest(), "bytes": path.stat().st_size}


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 16,8",
                                 param_hint="--hidden") from None
    return sizes


@click.command("train", context_settings={"max_content_width": 120})
@log_options()
@labels_option('Labels JSONL {"txn_id", "label", "label_ts_ms"}.', required=True)
@model_dir_option(old_names=("--out",))
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Random seed: same data and seed give a byte-identical model.onnx.")
@click.option("--eval-fraction", type=click.FloatRange(0.05, 0.95), default=0.3,
              show_default=True, help="Later share of the event-time range held out for "
              "evaluation (the boundary snaps back to a UTC midnight).")
@click.option("--algorithm", type=click.Choice(["mlp", "lgbm"]), default="lgbm",
              show_default=True, help="lgbm: LightGBM gradient-boosted trees (the Fraud "
              "Detection Handbook benchmark's winner, docs/handbook.md; needs the `train` "
              "extra's lightgbm and onnxmltools); mlp: scikit-learn MLP.")
@click.option("--hidden", default="16,8", show_default=True, help="(mlp) Hidden layer sizes.")
@click.option("--max-iter", type=click.IntRange(min=1), default=200, show_default=True,
              help="(mlp) Most training epochs.")
@click.option("--n-estimators", type=click.IntRange(min=1), default=300, show_default=True,
              help="(lgbm) Boosting rounds: trees in the model.")
@click.option("--learning-rate", type=click.FloatRange(0.0, min_open=True), default=0.05,
              show_default=True, help="(lgbm) Shrinkage of each tree.")
@click.option("--num-leaves", type=click.IntRange(min=2), default=31, show_default=True,
              help="(lgbm) Most leaves per tree.")
@click.option("--max-depth", type=click.IntRange(min=1), default=None,
              help="(lgbm) Deepest tree [default: no limit; --num-leaves bounds the trees].")
@click.option("--min-child-samples", type=click.IntRange(min=1), default=20, show_default=True,
              help="(lgbm) Fewest training rows in a leaf.")
@click.option("--subsample", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0,
              show_default=True, help="(lgbm) Share of rows drawn for each tree (seeded).")
@click.option("--colsample", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0,
              show_default=True, help="(lgbm) Share of features drawn for each tree (seeded).")
@click.option("--scale-pos-weight", type=click.FloatRange(0.0, min_open=True), default=None,
              help="(lgbm) Weight of a fraud row in the loss [default: 1, unweighted].")
@click.option("--freeze-precision", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.9,
              show_default=True, help="Freeze threshold: lowest score with this precision.")
@click.option("--alert-recall", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.9,
              show_default=True, help="Alert threshold: highest score with this recall.")
@click.option("--default/--no-default", "make_default", default=None,
              help="Make the new model the default [default: only if there is none yet].")
def train(events: Path, labels: Path, model_dir: Path, seed: int, eval_fraction: float,
          algorithm: str, hidden: str, max_iter: int, n_estimators: int, learning_rate: float,
          num_leaves: int, max_depth: int | None, min_child_samples: int, subsample: float,
          colsample: float, scale_pos_weight: float | None, freeze_precision: float,
          alert_recall: float, lateness_ms: int | None, now_ms: int | None,
          make_default: bool | None) -> None:
    """Train the fraud model on the earlier days, evaluate on the later days, export ONNX + card.

    --algorithm picks LightGBM's gradient-boosted trees (default) or the MLP; (mlp) and (lgbm)
    options apply to that algorithm only. Either model is served by the same worker.
    """
    from app.cli.features import merchant_table
    from app.features.offline import compute_features
    from app.features.training_set import build_training_set, read_labels
    from app.scoring.gbt import GbtParams
    from app.scoring.registry import DEFAULT_FILE, ModelRegistry
    from app.scoring.trainer import Algorithm, TrainConfig, train_model

    settings = load_settings()
    lateness = settings.allowed_lateness_ms if lateness_ms is None else lateness_ms
    now = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        trees = GbtParams(n_estimators=n_estimators, learning_rate=learning_rate,
                          num_leaves=num_leaves, max_depth=max_depth,
                          min_child_samples=min_child_samples, subsample=subsample,
                          colsample_bytree=colsample, scale_pos_weight=scale_pos_weight)
        config = TrainConfig(algorithm=cast(Algorithm, algorithm), seed=seed,
                             eval_fraction=eval_fraction, hidden=_hidden(hidden),
                             max_iter=max_iter, freeze_precision=freeze_precision,
                             alert_recall=alert_recall, gbt=trees)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    began = time.perf_counter()
    offline = compute_features(events, allowed_lateness_ms=lateness, now_ms=now,
                               max_bytes=settings.max_message_bytes,
                               merchants=merchant_table(labels))  # known before each day
    try:
        joined = build_training_set(offline, read_labels(labels))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--labels") from None
    click.echo(f"features: {offline.summary()}; labels joined {joined.joined}, "
               f"not joined {joined.unmatched_total} {joined.unmatched}")
    created_from = {
        "events": _file_id(events), "labels": _file_id(labels),
        "allowed_lateness_ms": lateness, "now_ms": now,
        "offline": {"accepted": offline.accepted, "late": offline.late,
                    "redelivered": offline.redelivered, "malformed": offline.malformed_total},
        "labels_joined": joined.joined, "labels_not_joined": dict(joined.unmatched),
    }
    try:
        model = train_model(joined.table, config, created_from=created_from)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except ImportError as exc:  # lightgbm / onnxmltools / scikit-learn are the `train` extra
        raise click.ClickException(f"{exc.name or exc} is not installed: pip install "
                                   "'fraudstream[train]'") from None
    registry = ModelRegistry(model_dir, device="cpu")
    first = not (model_dir / DEFAULT_FILE).exists()
    is_default = first if make_default is None else make_default
    path = registry.add(model.version, model.onnx_bytes, model.card, make_default=is_default)
    metrics = model.card["metrics"]["eval"]
    data = model.card["data"]
    click.echo(f"model {model.version} -> {path} ({len(model.onnx_bytes):,} bytes)"
               + (" [default]" if is_default else ""))
    if algorithm == "lgbm":
        click.echo(f"lgbm: {model.card['model']['trees']} trees, export max |ONNX - LightGBM| "
                   f"{model.card['metrics']['export_max_abs_diff_vs_lightgbm']:.2g}")
    click.echo(f"split at {data['split']['boundary_utc']}: train {data['train_rows']:,} rows "
               f"({data['train_positives']:,} fraud), eval {data['eval_rows']:,} rows "
               f"({data['eval_positives']:,} fraud)")
    click.echo(f"eval ROC AUC {metrics['roc_auc']:.4f}, PR AUC {metrics['pr_auc']:.4f}")
    for name in ("freeze", "alert"):
        m = metrics[name]
        click.echo(f"  {name} >= {m['threshold']:.6g}: precision {_pct(m['precision'])}, "
                   f"recall {_pct(m['recall'])}, {m['flagged']:,} flagged")
    click.echo(f"took {time.perf_counter() - began:.1f}s")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


@click.group("model")
@click.option("--model-dir", type=MODEL_DIR, default=None, hidden=True,
              help="The old place of each subcommand's --model-dir.")
@click.pass_context
def model(ctx: click.Context, model_dir: Path | None) -> None:
    """Train, inspect, check, activate, watch and shadow the models of a model directory."""
    ctx.meta[GROUP_MODEL_DIR] = model_dir


model.add_command(train)


@model.command("list")
@model_dir_option()
def list_models(model_dir: Path) -> None:
    """Every model version with its evaluation figures; * marks the default."""
    from app.scoring.contract import ModelError
    from app.scoring.registry import ModelRegistry, ModelRegistryError

    registry = ModelRegistry(model_dir, device="cpu")
    try:
        default = registry.default_version()
    except ModelRegistryError:
        default = None
    versions = registry.versions()
    if not versions:
        click.echo(f"no models in {model_dir.resolve()} (FRAUDSTREAM_MODEL_DIR or --model-dir "
                   f"looks elsewhere)")
        return
    for version in versions:
        mark = "*" if version == default else " "
        try:
            card = registry.card(version)
        except ModelError as exc:
            click.echo(f"{mark} {version}  INVALID: {exc}")
            continue
        ev = card.raw.get("metrics", {}).get("eval", {})
        click.echo(f"{mark} {version}  roc_auc={ev.get('roc_auc', float('nan')):.4f} "
                   f"pr_auc={ev.get('pr_auc', float('nan')):.4f} "
                   f"freeze>={card.thresholds.freeze:.6g} alert>={card.thresholds.alert:.6g}")


@model.command("validate")
@model_option("The model version to check.", required=True, old="version")
@model_dir_option()
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="Execution provider to load on (auto: as the worker).")
def validate(model_dir: Path, version: str, device: str) -> None:
    """Load model V as the worker would (contract, checksum, graph ops) and score a probe."""
    import numpy as np

    from app.features.declaration import FEATURE_NAMES
    from app.scoring.contract import ModelError
    from app.scoring.registry import ModelRegistry
    from app.scoring.scorer import Device, features_matrix

    registry = ModelRegistry(model_dir, device=cast(Device, device))
    try:
        loaded = registry.load(version)
    except (ModelError, RuntimeError) as exc:
        raise click.ClickException(f"INVALID: {exc}") from None
    try:
        from app.scoring.graph import TREE_OPS, foreign_ops
    except ImportError:
        click.echo("onnx is not installed: graph ops not checked")
    else:
        foreign = foreign_ops((loaded.path / "model.onnx").read_bytes())
        # a tree model's ensemble and its output slice run on onnxruntime's CPU kernels (also
        # inside a CUDA session): known and served; anything else foreign is refused
        trees = loaded.card.raw.get("model", {}).get("algorithm") == "lgbm"
        cpu_only = [op for op in foreign if trees and op in TREE_OPS]
        bad = [op for op in foreign if op not in cpu_only]
        if bad:
            raise click.ClickException(f"INVALID: ops without a CUDA kernel in the allow-list: "
                                       f"{', '.join(bad)}")
        if cpu_only:
            click.echo(f"note: {', '.join(cpu_only)} run on the CPU kernels (tree model)")
    probe = features_matrix([tuple(0 for _ in FEATURE_NAMES), tuple(1 for _ in FEATURE_NAMES)])
    scores = loaded.scorer.score(probe)
    if scores.shape != (2,) or not np.isfinite(scores).all():
        raise click.ClickException(f"INVALID: probe scores {scores!r}")
    click.echo(f"OK {version}: {len(FEATURE_NAMES)} features, provider "
               f"{loaded.scorer.active_provider}, thresholds freeze>={loaded.thresholds.freeze:.6g}"
               f" alert>={loaded.thresholds.alert:.6g}")


@model.command("activate")
@model_option("The model version every worker switches to.", required=True, old="version")
@model_dir_option()
@click.option("--without-reference", is_flag=True,
              help="Activate a model whose card has no drift reference (its drift is then "
                   "not counted by the workers).")
def activate(model_dir: Path, version: str, without_reference: bool) -> None:
    """Switch every worker to model V without a restart (compacted control topic).

    V is validated here first (its card must carry a drift reference, see `model
    reference`); each worker validates it again and swaps it in between batches, or refuses it
    (logged, counted) and keeps serving the model it has.
    """
    import asyncio

    from app.control.publisher import publish_activation
    from app.kafka.topics import ensure_topics
    from app.scoring.contract import ModelError
    from app.scoring.drift_reference import DriftReference
    from app.scoring.registry import ModelRegistry

    try:
        loaded = ModelRegistry(model_dir, device="cpu").load(version)
    except ModelError as exc:
        raise click.ClickException(f"not activated, {version} is invalid: {exc}") from None
    if not without_reference:
        try:
            DriftReference.of_card(loaded.card.raw, version)
        except ModelError as exc:  # its drift could not be watched: say how to fix it first
            raise click.ClickException(f"not activated, {exc} (or pass --without-reference "
                                       "to serve it unwatched)") from None
    settings = load_settings()
    asyncio.run(ensure_topics(settings))
    asyncio.run(publish_activation(settings, version))
    click.echo(f"activated {version}: workers switch between batches")


def _add_drift_commands() -> None:
    # the drift and shadow commands live in their own modules; the group is this one
    from app.cli.model_drift import drift, reference
    from app.cli.model_shadow import compare_cmd, shadow

    model.add_command(reference)
    model.add_command(drift)
    model.add_command(shadow)
    model.add_command(compare_cmd)


_add_drift_commands()
