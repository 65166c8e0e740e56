"""`fraudstream model shadow --model V | --stop` and `fraudstream model compare`."""

from __future__ import annotations

from pathlib import Path

import click

from app.cli.options import OUTPUT_FILE, labels_option, model_dir_option, model_option
from app.settings import load_settings


@click.command("shadow")
@model_option("The model version every worker also scores with.", old="version")
@model_dir_option()
@click.option("--stop", is_flag=True, help="End shadow scoring on every worker.")
def shadow(model_dir: Path, version: str | None, stop: bool) -> None:
    """Make every worker also score with model V, never acting on it (control topic).

    V is validated here first; each worker loads and validates it again and starts
    between batches (or refuses it, logged and counted). Both scores and both would-be
    decisions of every transaction go to `features.shadow`; `model compare` reads them.
    """
    import asyncio

    from app.control.publisher import publish_shadow
    from app.kafka.topics import ensure_topics
    from app.scoring.contract import ModelError
    from app.scoring.registry import ModelRegistry

    if stop == (version is not None):
        raise click.UsageError("give --model V to shadow, or --stop (not both)")
    if version is not None:
        try:
            ModelRegistry(model_dir, device="cpu").load(version)
        except ModelError as exc:
            raise click.ClickException(f"not shadowed, {version} is invalid: {exc}") from None
    settings = load_settings()
    asyncio.run(ensure_topics(settings))
    asyncio.run(publish_shadow(settings, version))
    if version is None:
        click.echo("shadow stopped: workers stop shadow scoring between batches")
    else:
        click.echo(f"shadowing {version}: workers also score with it between batches, "
                   f"rows go to {settings.topic('features.shadow')}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


@click.command("compare")
@labels_option('Labels JSONL {"txn_id", "label", "label_ts_ms"}: precision/recall of both.')
@click.option("--out", type=OUTPUT_FILE, default=None,
              help="Write every differing action as JSONL here.")
@click.option("--show", type=click.IntRange(min=0), default=20, show_default=True,
              help="Differing actions printed.")
def compare_cmd(labels: Path | None, out: Path | None, show: int) -> None:
    """Active vs shadow model over everything in `features.shadow`: agreement, the actions that
    would differ, score correlation, and with --labels precision/recall of both."""
    import orjson

    from app.cli.errors import require_parent_dir
    from app.features.training_set import read_labels
    from app.kafka import topics
    from app.kafka.shadowrow import iter_shadow_rows
    from app.scoring.comparison import compare

    require_parent_dir(out, "--out")
    settings = load_settings()
    known = None
    if labels is not None:
        try:
            known = {lab.txn_id: lab.label for lab in read_labels(labels)}
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--labels") from None
    topic = settings.topic(topics.FEATURES_SHADOW)
    result = compare(iter_shadow_rows(settings, topic), known)
    if result.transactions == 0:
        raise click.ClickException(f"no shadow rows in {topic}: start one with `fraudstream "
                                   "model shadow --model V` and let the workers score traffic")
    click.echo(f"active {', '.join(result.active_versions)} vs shadow "
               f"{', '.join(result.shadow_versions)} over {result.transactions:,} transactions")
    click.echo(f"agreement {result.agreement:.4%} ({result.agreeing:,} same decisions); "
               f"{len(result.differing):,} actions would differ; score correlation "
               f"{_pct(result.correlation)}")
    for d in result.differing[:show]:
        click.echo(f"  {d.type:<15} only {d.by:<6} txn {d.txn_id} card {d.card_id} "
                   f"(active {d.active_score:.4f}, shadow {d.shadow_score:.4f})")
    if len(result.differing) > show:
        click.echo(f"  … {len(result.differing) - show:,} more (--out FILE writes them all)")
    for name, q in result.quality.items():
        click.echo(f"{name}: freeze precision {_pct(q.freeze_precision)} recall "
                   f"{_pct(q.freeze_recall)}; any action precision {_pct(q.action_precision)} "
                   f"recall {_pct(q.action_recall)} ({result.labelled:,} labelled)")
    if out is not None:
        out.write_bytes(b"".join(orjson.dumps(d.to_dict()) + b"\n" for d in result.differing))
        click.echo(f"differing actions -> {out}")
