"""`fraudstream action-service`: run the idempotent action service until SIGTERM/SIGINT."""

from __future__ import annotations

import logging

import click

from app.settings import load_settings

logger = logging.getLogger(__name__)


@click.command("action-service")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Listen port [default: FRAUDSTREAM_ACTION_SERVICE_PORT].",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen address.")
@click.option(
    "--shutdown-timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds in-flight requests get to finish after SIGTERM.",
)
def action_service(port: int | None, host: str, shutdown_timeout: float) -> None:
    """Serve POST /v1/actions and friends; Redis from REDIS_URL or the local stack."""
    from aiohttp import web

    from app.action_service.app import create_app
    from app.security.secret import SecretError
    from app.security.tokens import service_tokens

    settings = load_settings()
    if port is not None:
        settings = settings.replace(action_service_port=port)
    try:
        tokens = service_tokens(settings, host)
    except SecretError as exc:
        raise click.ClickException(str(exc)) from None
    # run_app turns SIGTERM/SIGINT into a graceful stop: stop accepting, let in-flight
    # requests finish (up to shutdown_timeout), then run cleanup_ctx (closes Redis).
    web.run_app(
        create_app(settings, tokens=tokens, forward_labels=True),
        host=host,
        port=settings.action_service_port,
        shutdown_timeout=shutdown_timeout,
        access_log=None,
        print=lambda _banner: logger.info(
            "action service listening on http://%s:%d (Redis %s, keys kept %d s)", host,
            settings.action_service_port, _redacted(settings.effective_redis_url),
            settings.idempotency_ttl_s),
        handle_signals=True,
    )


def _redacted(url: str) -> str:
    """A Redis URL without its password (logs never carry secrets)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
