"""`fraudstream quality`: live precision and recall, labels joined to decisions, on /metrics."""

from __future__ import annotations

import logging

import click

log = logging.getLogger(__name__)


@click.command("quality")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port of /metrics [default: FRAUDSTREAM_QUALITY_PORT].")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
def quality(port: int | None, host: str) -> None:
    """Read features.served, actions and labels from their start and serve, on /metrics,
    precision of freezes and recall of fraud per event day and label maturity (1d, 7d, 30d,
    all), as `fraudstream watch` and the Grafana dashboard show them."""
    from aiohttp import web

    from app.quality.exporter import create_app
    from app.settings import load_settings

    settings = load_settings()
    if port is not None:
        settings = settings.replace(quality_port=port)
    logging.getLogger(__name__).setLevel(logging.INFO)
    log.info("quality metrics on http://%s:%d/metrics", host, settings.quality_port)
    web.run_app(create_app(settings), host=host, port=settings.quality_port,
                print=None, handle_signals=True)
