"""drop_topics refuses a deployment without a topic prefix before it touches the broker."""

from __future__ import annotations

import asyncio

import pytest

from app.kafka.topics import drop_topics
from app.settings import load_settings


def test_drop_topics_refuses_an_unprefixed_deployment() -> None:
    settings = load_settings().replace(topic_prefix="", kafka_bootstrap="127.0.0.1:1")
    with pytest.raises(ValueError, match="topic_prefix"):
        asyncio.run(drop_topics(settings))
