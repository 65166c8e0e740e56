"""Dropping a throwaway deployment's topics removes its own and nobody else's."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from app.harness.procs import wait_until
from app.kafka.inspect import admin_client
from app.kafka.topics import CONTROL, LABEL_TOPICS, PIPELINE_TOPICS, drop_topics, ensure_topics
from app.settings import Settings

pytestmark = pytest.mark.integration


async def _topics(settings: Settings) -> set[str]:
    async with admin_client(settings) as admin:
        return set(await admin.list_topics())


def test_drop_topics_takes_its_own_and_spares_a_neighbour(stack_settings: Settings) -> None:
    tag = uuid.uuid4().hex[:8]
    mine = stack_settings.replace(topic_prefix=f"d{tag}.", app_id=f"fs-drop-{tag}")
    neighbour = stack_settings.replace(topic_prefix=f"d{tag}x.", app_id=f"fs-drop-{tag}x")
    asyncio.run(ensure_topics(mine))
    asyncio.run(ensure_topics(neighbour))
    try:
        dropped = set(asyncio.run(drop_topics(mine)))
        assert dropped == {mine.topic(t) for t in (*PIPELINE_TOPICS, *LABEL_TOPICS, CONTROL)}

        def gone() -> bool:
            return not (dropped & asyncio.run(_topics(mine)))

        wait_until(gone, timeout_s=30, what="the dropped topics to disappear")
        left = asyncio.run(_topics(neighbour))
        assert {neighbour.topic(t) for t in PIPELINE_TOPICS} <= left
    finally:
        asyncio.run(drop_topics(neighbour))
