"""ConsumerPlan: what the Faust app tells its consumer, set once by create_app."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from stream_support import real_consumer

from app.kafka import topics
from app.settings import Settings
from app.stream.app import create_app
from app.stream.kafka.plan import ConsumerPlan


def test_only_exactly_once_has_gapped_topics_and_they_are_not_transactional() -> None:
    plan = ConsumerPlan(chunk_topics=frozenset({"actions", "transactions"}),
                        transactional_topics=frozenset({"transactions"}))
    assert plan.gapped_topics == frozenset()
    assert dataclasses.replace(plan, processing="exactly_once").gapped_topics == {"actions"}


def test_a_plan_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ConsumerPlan().chunk_topics = frozenset({"x"})  # type: ignore[misc]


async def test_the_consumer_reads_the_plan_of_its_app() -> None:
    consumer, _ = real_consumer({})
    assert consumer.plan is consumer.app.consumer_plan
    assert consumer.chunk_topics == {"transactions"} and consumer.gapped_topics == frozenset()


@pytest.mark.parametrize("processing", ["at_least_once", "exactly_once"])
async def test_the_dispatch_agent_alone_reads_chunks_of_actions_only(
        tmp_path: Path, processing: str) -> None:
    settings = Settings().replace(state_dir=tmp_path, processing=processing)
    app = create_app(settings, web_port=1, agents=frozenset({"dispatch"})).app
    plan = app.consumer_plan
    actions = settings.topic(topics.ACTIONS)
    assert plan == ConsumerPlan(processing=processing, chunk_topics=frozenset({actions}))
    # exactly_once: the actions topic is written in transactions by the score engines
    assert plan.gapped_topics == (frozenset({actions}) if processing == "exactly_once"
                                  else frozenset())
    assert app.consumer.plan is plan and app.consumer.chunk_topics == {actions}
