"""`fraudstream worker` (the Faust worker: score, and dispatch unless --no-dispatch) and
`fraudstream dispatcher` (dispatch alone, in its own consumer group)."""

from __future__ import annotations

import click

from app.settings import Settings, load_settings


def _check_secrets(settings: Settings, *, dispatch: bool) -> None:
    """Missing or unreadable Kafka credentials or action token: one line, before Faust starts."""
    from app.security.kafka import kafka_client_kwargs
    from app.security.secret import SecretError
    from app.security.tokens import client_token

    try:
        kafka_client_kwargs(settings)
        if dispatch:
            client_token(settings)
    except SecretError as exc:
        raise click.ClickException(str(exc)) from None


def _listen_address(_ctx: click.Context, _param: click.Parameter,
                    value: str | None) -> tuple[str, int] | None:
    """HOST:PORT of --metrics-listen, checked before anything starts."""
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (e.g. 0.0.0.0:9466)")
    return host, int(port)


def _serve_metrics(address: tuple[str, int] | None) -> None:
    """The worker's /metrics (the same registry as the web port's) on its own listener.

    The Faust web server stays on loopback (it also serves debug pages); in a container,
    Prometheus scrapes this one instead.
    """
    if address is None:
        return
    from prometheus_client import start_http_server

    from app.stream.pages import WorkerFamilies

    host, port = address
    try:
        start_http_server(port, addr=host, registry=WorkerFamilies())
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on {host}:{port}: {exc.strerror}; "
                                   f"pick another --metrics-listen") from None


@click.command()
@click.option("--web-port", type=int, default=None,
              help="Worker web port (metrics); default FRAUDSTREAM_WEB_PORT. One per worker.")
@click.option("--metrics-listen", "metrics_listen", default=None, metavar="HOST:PORT",
              callback=_listen_address,
              help="Also serve /metrics here (e.g. 0.0.0.0:9466 in a container, for "
                   "Prometheus); the web port stays on 127.0.0.1.")
@click.option("--loglevel", default="WARNING", show_default=True, help="Worker log level.")
@click.option("--dispatch/--no-dispatch", default=True, show_default=True,
              help="Also run the dispatch agent in this worker.")
def worker(web_port: int | None, metrics_listen: tuple[str, int] | None, loglevel: str,
           dispatch: bool) -> None:
    """Run one Faust worker of the pipeline (N of them share the work in one consumer group)."""
    from app.stream.worker import WorkerStartError, run_worker

    agents = frozenset({"score", "dispatch"} if dispatch else {"score"})
    settings = load_settings()
    _check_secrets(settings, dispatch=dispatch)
    _serve_metrics(metrics_listen)
    try:
        run_worker(settings, web_port=web_port, loglevel=loglevel, agents=agents)
    except WorkerStartError as exc:
        raise click.ClickException(str(exc)) from None


@click.command()
@click.option("--web-port", type=int, default=None, help="Web port (metrics).")
@click.option("--loglevel", default="WARNING", show_default=True)
def dispatcher(web_port: int | None, loglevel: str) -> None:
    """Run only the dispatch agent, in its own consumer group (<app id>-dispatch).

    Use it with workers started with --no-dispatch; running both only repeats deliveries,
    which the action service absorbs.
    """
    from app.stream.worker import run_worker

    settings = load_settings()
    _check_secrets(settings, dispatch=True)
    run_worker(settings.replace(app_id=f"{settings.app_id}-dispatch"), web_port=web_port,
               loglevel=loglevel, agents=frozenset({"dispatch"}))
