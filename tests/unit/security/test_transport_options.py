"""Kafka and Redis client options built from settings (no network)."""

from __future__ import annotations

import ssl
from pathlib import Path

import faust
import pytest

from app.security.kafka import faust_broker_credentials, kafka_client_kwargs
from app.security.redis import redis_connection_kwargs
from app.security.secret import SecretError
from app.settings import load_settings


def test_plaintext_is_only_the_bootstrap():
    settings = load_settings({}, kafka_bootstrap="k:9092")
    assert kafka_client_kwargs(settings) == {"bootstrap_servers": "k:9092"}
    assert faust_broker_credentials(settings) is None


def test_ssl_gives_a_verifying_context():
    settings = load_settings({"FRAUDSTREAM_KAFKA_SECURITY_PROTOCOL": "SSL"})
    kwargs = kafka_client_kwargs(settings)
    assert kwargs["security_protocol"] == "SSL"
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert isinstance(faust_broker_credentials(settings), faust.SSLCredentials)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_sasl_ssl_with_a_password_file(tmp_path: Path, mechanism: str):
    secret = tmp_path / "kafka-password"
    secret.write_text("pw-from-file\n")
    settings = load_settings({"FRAUDSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                              "FRAUDSTREAM_KAFKA_SASL_MECHANISM": mechanism,
                              "FRAUDSTREAM_KAFKA_SASL_USERNAME": "fraudstream",
                              "FRAUDSTREAM_KAFKA_SASL_PASSWORD_FILE": str(secret)})
    kwargs = kafka_client_kwargs(settings)
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == mechanism
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
        "fraudstream", "pw-from-file")
    credentials = faust_broker_credentials(settings)
    assert credentials.mechanism.value == mechanism and credentials.ssl_context is not None
    assert "pw-from-file" not in repr(credentials)


def test_sasl_without_credentials_is_refused():
    settings = load_settings({"FRAUDSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    with pytest.raises(SecretError, match="SASL_USERNAME"):
        kafka_client_kwargs(settings)


def test_unknown_protocol_is_refused():
    with pytest.raises(ValueError, match="FRAUDSTREAM_KAFKA_SECURITY_PROTOCOL"):
        load_settings({"FRAUDSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})


def test_redis_tls_and_acl_user(tmp_path: Path):
    secret = tmp_path / "redis-password"
    secret.write_text("r-pw\n")
    settings = load_settings({"REDIS_URL": "rediss://127.0.0.1:6380/0",
                              "FRAUDSTREAM_REDIS_SSL_CA_FILE": "/etc/ca.pem",
                              "FRAUDSTREAM_REDIS_USERNAME": "actions",
                              "FRAUDSTREAM_REDIS_PASSWORD_FILE": str(secret)})
    assert redis_connection_kwargs(settings) == {
        "ssl_cert_reqs": "required", "ssl_ca_certs": "/etc/ca.pem",
        "username": "actions", "password": "r-pw"}
    plain = load_settings({}, redis_url="redis://127.0.0.1:1/0")
    assert redis_connection_kwargs(plain) == {}
