"""Shared fixtures: the real stack for integration/fault tests (started unless env names one)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from app.harness.pipeline import drop_quietly
from app.kafka.topics import ensure_topics
from app.settings import Settings, load_settings


@pytest.fixture(scope="session")
def stack_settings() -> Iterator[Settings]:
    """Settings pointing at a running Kafka and Redis.

    With KAFKA_BOOTSTRAP/REDIS_URL set (CI after `stack up`, docker-compose) those are used;
    otherwise the local stack is brought up for the session and stopped again afterwards.
    """
    from app.stack.manager import Stack

    stack = Stack(load_settings())
    settings = stack.settings  # the profile resolved (FRAUDSTREAM_STACK_PROFILE or remembered)
    report = stack.up()
    try:
        yield settings.replace(kafka_bootstrap=settings.effective_kafka_bootstrap,
                               redis_url=settings.effective_redis_url)
    finally:
        if report.started:
            stack.down()


@pytest.fixture(scope="session")
def redis_url(stack_settings: Settings) -> str:
    """URL of the real Redis (db 0); tests that flush must switch to their own db index."""
    return stack_settings.effective_redis_url


@pytest.fixture
def fresh_settings(stack_settings: Settings) -> Iterator[Settings]:
    """Settings on fresh topics and a fresh app id (consumer group, changelog) for one test.

    The topics are deleted afterwards, so a long-lived local stack does not pile them up.
    """
    tag = uuid.uuid4().hex[:8]
    settings = stack_settings.replace(topic_prefix=f"t{tag}.", app_id=f"fs-test-{tag}")
    asyncio.run(ensure_topics(settings))
    yield settings
    drop_quietly(settings)
