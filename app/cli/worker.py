"""`fraudstream worker` (the Faust worker: score, and dispatch when built) and `dispatcher`."""

from __future__ import annotations

import click

from app.settings import load_settings


@click.command()
@click.option("--web-port", type=int, default=None,
              help="Worker web port (metrics); default FRAUDSTREAM_WEB_PORT. One per worker.")
@click.option("--loglevel", default="WARNING", show_default=True, help="Worker log level.")
def worker(web_port: int | None, loglevel: str) -> None:
    """Run one Faust worker of the pipeline (N of them share the work in one consumer group)."""
    from app.stream.worker import run_worker

    run_worker(load_settings(), web_port=web_port, loglevel=loglevel)


@click.command()
def dispatcher() -> None:
    """Run only the dispatch agent (POSTs actions to the action service)."""
    raise click.ClickException("the dispatcher is not built yet")
