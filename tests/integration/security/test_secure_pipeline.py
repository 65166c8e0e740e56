"""The secure profile end to end: SASL_SSL Kafka and TLS Redis with an ACL user, replay → worker →
action service → Redis; clients without credentials are refused; no secret or card id in logs."""

from __future__ import annotations

import asyncio
import re
import ssl
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from app.action_service.ledger import read_effects
from app.harness.pipeline import lines_of, live_actions, make_log, replay
from app.harness.procs import (
    Spawned,
    free_port,
    http_ready,
    settings_env,
    spawn_worker,
    wait_until,
)
from app.kafka import topics
from app.kafka.inspect import group_lag
from app.kafka.topics import ensure_topics
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings, load_settings
from app.stack.secure import CLIENT_USER, SecureStack
from tests.support.logscan import leaks

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROTATED_TOKEN = f"rotated-{uuid.uuid4().hex}"
READ_TOKEN = f"reader-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    """Its own Kafka and Redis on free ports and a fresh state dir; stopped by PID afterwards."""
    base = load_settings().replace(
        state_dir=tmp_path_factory.mktemp("secure-state"), kafka_bootstrap=None, redis_url=None,
        kafka_port=free_port(), kafka_controller_port=free_port(), redis_port=free_port(),
        topic_partitions=2, kafka_heap="512m")
    stack = SecureStack(base)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


def _secrets(stack: SecureStack) -> list[str]:
    p = stack.profile
    names = ("kafka-admin-password", "kafka-client-password", "redis-admin-password",
             "redis-client-password", "action-tokens")
    return [p.read(n) for n in names] + [ROTATED_TOKEN, READ_TOKEN]


def _request(url: str, token: str, body: bytes | None = None) -> int:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - loopback
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_pipeline_on_the_secure_profile(secure_stack: SecureStack, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    settings: Settings = secure_stack.settings.replace(
        topic_prefix=f"s{tag}.", app_id=f"fs-secure-{tag}", action_service_port=port,
        action_service_url=f"http://127.0.0.1:{port}",
        # the dispatcher sends the first; the service also accepts the file's token
        action_token=ROTATED_TOKEN, action_read_token=READ_TOKEN)
    asyncio.run(ensure_topics(settings))
    log = make_log(cards=400, txns=6000, seed=181)
    lines = lines_of(log)
    # -vv: every INFO and DEBUG line the service writes is scanned below
    service = Spawned([sys.executable, "-m", "app.cli.main", "-vv", "action-service", "--port",
                       str(port)], settings_env(settings), tmp_path / "action-service.log")
    worker = spawn_worker(settings, tmp_path)
    try:
        wait_until(lambda: http_ready(f"{settings.action_service_url}/readyz"), timeout_s=30,
                   what="the action service on TLS Redis")
        sent = replay(settings, lines)
        assert sent == len(lines)
        source, actions = settings.topic(topics.TRANSACTIONS), settings.topic(topics.ACTIONS)

        def drained() -> bool:
            assert worker.alive(), worker.log_tail()
            return (asyncio.run(group_lag(settings, settings.app_id, source)) == 0
                    and asyncio.run(group_lag(settings, settings.app_id, actions)) == 0)

        wait_until(drained, timeout_s=240, interval_s=1.0, what="scoring and dispatch to drain")
        # the rotation token in use, the file's token and the read-only one at the HTTP edge
        file_token = secure_stack.profile.read("action-tokens")
        card = orjson.loads(lines[0])["card_id"]
        for token in (ROTATED_TOKEN, file_token, READ_TOKEN):
            assert _request(f"{settings.action_service_url}/v1/cards/{card}", token) == 200
        assert _request(f"{settings.action_service_url}/v1/actions", READ_TOKEN, b"{}") == 403
        assert _request(f"{settings.action_service_url}/v1/actions", "wrong", b"{}") == 401
    finally:
        worker.stop()
        service.stop()

    live = live_actions(settings)
    admin = secure_stack.redis.admin_client()
    try:
        ledger = [fields for _id, fields in read_effects(admin)]
    finally:
        admin.close()
    per_key = Counter(e["idempotency_key"] for e in ledger)
    assert live and set(per_key) == set(live)  # every decided action applied ...
    assert set(per_key.values()) == {1}  # ... exactly once

    # no secret anywhere in what the processes and servers logged; card ids only pseudonymised
    # by the action service (the worker logs none either)
    logs = [service.log_path, worker.log_path, secure_stack.kafka.process.log_file,
            secure_stack.redis.process.log_file]
    assert "action applied" in service.log_path.read_text()  # INFO lines were written
    cards = {m.decode() for line in lines for m in re.findall(rb'"card_id":"([^"]+)"', line)}
    assert len(cards) > 100
    found = leaks(logs, _secrets(secure_stack), cards=cards)
    assert not found, "\n".join(found[:20])


async def _kafka_lists_topics(**kwargs: object) -> None:
    """A full client session (bootstrap, metadata, list topics); raises if it cannot."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(request_timeout_ms=5000, **kwargs)  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(admin.start(), 15)
        await asyncio.wait_for(admin.list_topics(), 10)
    finally:
        await admin.close()


def _kafka_refuses(bootstrap: str, expected: type[BaseException], match: str,
                   **kwargs: object) -> None:
    """One connection as `kwargs` configure it (TLS, SASL), then a metadata request: it must
    fail with `expected` matching `match`, the broker's refusal. The admin client turns every
    failure into "Unable to bootstrap", so this is one level down, where the cause surfaces;
    anything else (a timeout, a wrong argument, a refused TCP connect) fails the test."""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    host, port = bootstrap.split(",")[0].rsplit(":", 1)

    async def connect_and_ask() -> None:
        conn = await create_conn(host, int(port), request_timeout_ms=5000, **kwargs)
        try:
            await conn.send(MetadataRequest([]))
        finally:
            conn.close()

    with pytest.raises(expected, match=match):
        asyncio.run(asyncio.wait_for(connect_and_ask(), 15))


def test_clients_without_credentials_are_refused(secure_stack: SecureStack) -> None:
    from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

    good = secure_stack.settings
    bootstrap = good.effective_kafka_bootstrap
    secure = kafka_client_kwargs(good)
    conn_kwargs = {k: v for k, v in secure.items() if k != "bootstrap_servers"}
    asyncio.run(_kafka_lists_topics(**secure))
    asyncio.run(_kafka_lists_topics(**{**secure, "sasl_mechanism": "PLAIN"}))  # PLAIN over TLS
    # plaintext on the SASL_SSL listener: the broker closes the connection (no TLS handshake)
    _kafka_refuses(bootstrap, KafkaConnectionError, r"Connection at .* closed")
    # TLS but no SASL: the broker closes it at the first request, and says why in its log
    log = secure_stack.kafka.process.log_file
    unexpected = "Unexpected Kafka request of type METADATA during SASL handshake"
    seen = log.read_text(errors="replace").count(unexpected)
    _kafka_refuses(bootstrap, KafkaConnectionError, r"Connection at .* closed",
                   security_protocol="SSL", ssl_context=secure["ssl_context"])
    wait_until(lambda: log.read_text(errors="replace").count(unexpected) > seen, timeout_s=10,
               what="the broker to log the refused SASL handshake")
    # a wrong password: SCRAM authentication fails
    _kafka_refuses(bootstrap, SaslAuthenticationFailed, "invalid credentials",
                   **{**conn_kwargs, "sasl_plain_password": "not-the-password"})
    # a client that does not trust our CA: TLS verification fails
    _kafka_refuses(bootstrap, ssl.SSLCertVerificationError, "CERTIFICATE_VERIFY_FAILED",
                   **{**conn_kwargs, "ssl_context": ssl.create_default_context()})

    port, ca = good.redis_port, str(good.redis_ssl_ca_file)
    # plaintext on the TLS port: the server resets it (not "refused": the port is open)
    with pytest.raises(redis.ConnectionError, match="Connection reset by peer|closed by server"):
        redis.Redis(host="127.0.0.1", port=port, socket_timeout=3).ping()
    # a client that does not trust our CA: TLS verification fails
    with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        redis.Redis(host="127.0.0.1", port=port, ssl=True, socket_timeout=3).ping()
    # TLS, no user: NOAUTH (redis-py drops the prefix; its class says which one it was)
    with pytest.raises(redis.AuthenticationError, match="authenticated|Authentication required"):
        redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca,
                    socket_timeout=3).ping()
    with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
        redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca, username=CLIENT_USER,
                    password="not-the-password", socket_timeout=3).ping()  # WRONGPASS
    service = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca,
                          username=CLIENT_USER,
                          password=secure_stack.profile.read("redis-client-password"),
                          socket_timeout=3)
    try:
        assert service.ping()
        # commands it never sends, and keys outside its patterns (GET/SET are the key claims')
        for forbidden in (("FLUSHALL",), ("KEYS", "*"), ("CONFIG", "GET", "*"), ("DEL", "idem:x"),
                          ("GET", "other:x"), ("SET", "other:x", "1"), ("HGETALL", "other:x")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                service.execute_command(*forbidden)
    finally:
        service.close()
