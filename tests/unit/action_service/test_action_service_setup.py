"""App factory and store guards, and the Lua script's shape (no network)."""

from __future__ import annotations

import pytest
from redis.asyncio import ConnectionPool

from app.action_service.app import create_app
from app.action_service.appkeys import IN_FLIGHT, METRICS, SETTINGS
from app.action_service.apply_script import apply_script_source
from app.action_service.decisions import decide_script_source
from app.action_service.store import ActionStore, render_card
from app.settings import load_settings
from tests.support.cards import unknown_card_view


def test_empty_token_is_refused():
    with pytest.raises(ValueError, match="ACTION_TOKEN"):
        create_app(load_settings({}, action_token=""))


@pytest.mark.parametrize(("ttl", "margin"), [(3600, 3600), (3600, 7200), (3600, -1)])
def test_margin_must_be_below_ttl(ttl, margin):
    settings = load_settings({}, idempotency_ttl_s=ttl, idempotency_margin_s=margin)
    with pytest.raises(ValueError, match="MARGIN"):
        create_app(settings)


def test_factory_builds_without_connecting():
    calls: list[object] = []
    settings = load_settings({}, action_token="t")
    app = create_app(settings, redis_client_factory=lambda s: calls.append(s))  # type: ignore[arg-type,return-value]
    assert calls == []  # the client is built by cleanup_ctx, at startup, not here
    assert app[SETTINGS] is settings
    assert app[IN_FLIGHT] == set()
    assert b"action_service_requests_total" in app[METRICS].exposition()


def test_two_apps_have_independent_metrics():
    a = create_app(load_settings({}, action_token="t"))
    b = create_app(load_settings({}, action_token="t"))
    a[METRICS].gone.inc()
    assert b"action_service_gone_total 1.0" in a[METRICS].exposition()
    assert b"action_service_gone_total 0.0" in b[METRICS].exposition()


class _NoRedis:
    """Only a pool to copy connection options from; nothing connects."""

    connection_pool = ConnectionPool.from_url("redis://127.0.0.1:1/0")


@pytest.mark.parametrize(
    ("ttl_ms", "margin_ms", "alerts"), [(0, 0, 1), (1000, 1000, 1), (1000, -1, 1), (1000, 10, 0)]
)
def test_store_guards(ttl_ms, margin_ms, alerts):
    with pytest.raises(ValueError):
        ActionStore(_NoRedis(), ttl_ms=ttl_ms, margin_ms=margin_ms, alerts_per_card=alerts)  # type: ignore[arg-type]


def test_store_max_age_is_ttl_minus_margin():
    store = ActionStore(_NoRedis(), ttl_ms=86_400_000, margin_ms=3_600_000, alerts_per_card=5)  # type: ignore[arg-type]
    assert store.max_age_ms == 82_800_000


def test_script_checks_everything_before_its_first_write():
    lines = apply_script_source().splitlines()
    assert lines[0] == "#!lua"
    code = [line.split("--")[0] for line in lines]
    # All per-action logic is in apply_one; the batch loop after it only calls it.
    body = code.index("local function apply_one(k, a)")
    loop = code.index("local reply = {now_ms}")
    # The replay branch's only write is its durable replay counter (stats), made after that
    # branch's own fingerprint check; every effect-bearing write comes after all the checks.
    verbs = ("'HSET'", "'XADD'", "'RPUSH'", "'LTRIM'", "'HINCRBY'", "'PEXPIRE'")
    writes = [i for i, line in enumerate(code)
              if "stats" not in line and any(w in line for w in verbs)]
    checks = [
        i
        for i, line in enumerate(code)
        if "return 'gone'" in line
        or "return 'future'" in line
        or "return 'mismatch'" in line
        or "wrong_type(pair" in line
    ]
    # gone, future, two mismatches (claim, record), the alert types, the review types
    assert len(checks) == 6 and writes
    assert body < min(checks) and max(checks) < min(writes) and max(writes) < loop


def test_card_view_of_an_unknown_card():
    assert render_card("c", {}, []) == unknown_card_view("c")


def test_decision_script_checks_everything_before_its_first_write():
    code = [line.split("--")[0] for line in decide_script_source().splitlines()]
    verbs = ("'HSET'", "'XADD'", "'RPUSH'", "'LTRIM'", "'HINCRBY'", "'PEXPIRE'")
    writes = [i for i, line in enumerate(code) if any(w in line for w in verbs)]
    checks = [i for i, line in enumerate(code)
              if "'mismatch'" in line or "error_reply" in line]
    assert len(checks) == 3 and writes
    assert max(checks) < min(writes)
    # the first write is the ledger entry: the effect, label and record come after it
    assert "XADD', effects" in code[min(writes)]


def test_wait_replicas_default_follows_the_url_form():
    assert load_settings({}, redis_url="redis://h:1/0").effective_redis_wait_replicas == 0
    assert load_settings({}, redis_url="redis+cluster://h:1").effective_redis_wait_replicas == 1
    env = {"FRAUDSTREAM_REDIS_WAIT_REPLICAS": "2"}
    assert load_settings(env, redis_url="redis+cluster://h:1").effective_redis_wait_replicas == 2
    env = {"FRAUDSTREAM_REDIS_WAIT_REPLICAS": "0"}
    assert load_settings(env, redis_url="redis+cluster://h:1").effective_redis_wait_replicas == 0


def test_wait_timeout_must_be_below_the_redis_timeout():
    settings = load_settings({}, redis_url="redis+cluster://h:1", redis_wait_timeout_ms=2000,
                             action_redis_timeout_s=2.0, action_token="t")
    with pytest.raises(ValueError, match="WAIT_TIMEOUT_MS"):
        create_app(settings)
