"""Kafka client options from settings: one place builds TLS and SASL for every client."""

from __future__ import annotations

import ssl
from typing import Any

from app.security.secret import SecretError, secret_value
from app.settings import Settings


def kafka_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """A verifying TLS context (CA, optional client certificate), or None under PLAINTEXT."""
    if settings.kafka_security_protocol == "PLAINTEXT":
        return None
    cafile = settings.kafka_ssl_cafile
    context = ssl.create_default_context(cafile=str(cafile) if cafile is not None else None)
    if settings.kafka_ssl_certfile is not None:
        keyfile = settings.kafka_ssl_keyfile
        context.load_cert_chain(str(settings.kafka_ssl_certfile),
                                str(keyfile) if keyfile is not None else None)
    return context


def _sasl_password(settings: Settings) -> str:
    password = secret_value(settings.kafka_sasl_password, settings.kafka_sasl_password_file,
                            "FRAUDSTREAM_KAFKA_SASL_PASSWORD_FILE")
    if not settings.kafka_sasl_username or not password:
        raise SecretError("SASL_SSL needs FRAUDSTREAM_KAFKA_SASL_USERNAME and "
                          "FRAUDSTREAM_KAFKA_SASL_PASSWORD (or _FILE)")
    return password


def kafka_client_kwargs(settings: Settings) -> dict[str, Any]:
    """Keyword arguments every aiokafka producer, consumer and admin client takes
    (bootstrap servers included), so no client can forget the security settings."""
    kwargs: dict[str, Any] = {"bootstrap_servers": settings.effective_kafka_bootstrap}
    protocol = settings.kafka_security_protocol
    if protocol == "PLAINTEXT":
        return kwargs
    kwargs["security_protocol"] = protocol
    kwargs["ssl_context"] = kafka_ssl_context(settings)
    if protocol == "SASL_SSL":
        kwargs["sasl_mechanism"] = settings.kafka_sasl_mechanism
        kwargs["sasl_plain_username"] = settings.kafka_sasl_username
        kwargs["sasl_plain_password"] = _sasl_password(settings)
    return kwargs


def faust_broker_credentials(settings: Settings) -> Any:
    """Faust's `broker_credentials` for the same settings (None under PLAINTEXT)."""
    import faust

    protocol = settings.kafka_security_protocol
    if protocol == "PLAINTEXT":
        return None
    context = kafka_ssl_context(settings)
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    return faust.SASLCredentials(
        username=settings.kafka_sasl_username,
        password=_sasl_password(settings),
        ssl_context=context,
        mechanism=settings.kafka_sasl_mechanism,
    )
