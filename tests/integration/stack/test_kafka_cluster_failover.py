"""The cluster profile's Kafka: three brokers, RF 3, a leader SIGKILLed mid-produce, nothing lost.

Brings its own three-node cluster up on its own ports and state dir (the shared stack is left
alone), and down again at the end.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.harness.brokers import partitions
from app.harness.procs import wait_until
from app.kafka import topics
from app.kafka.topics import ensure_topics
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings, load_settings
from app.stack.kafka_cluster import KafkaCluster, PartitionState, broker_ids
from app.stack.manager import port_taken

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Ports 29120..29125 (brokers 29120/22/24, controllers one above each).
BASE_PORT = 29120
MESSAGES = 3_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    taken = [p for p in range(BASE_PORT, BASE_PORT + 6) if port_taken(p)]
    if taken:
        pytest.fail(f"ports {taken} are taken: the cluster test needs {BASE_PORT}..{BASE_PORT + 5}")
    state = Path(tempfile.mkdtemp(prefix="kc-it-", dir="/tmp"))
    settings = load_settings({}, state_dir=state, stack_profile="cluster",
                             kafka_cluster_port=BASE_PORT, topic_prefix="kc.", topic_partitions=3)
    settings = settings.replace(kafka_bootstrap=settings.local_kafka_bootstrap)
    kafka = KafkaCluster(settings)
    try:
        kafka.ensure_jars()
        kafka.start()
        kafka.wait_ready(timeout_s=90)
        yield kafka
    finally:
        kafka.stop()
        shutil.rmtree(state, ignore_errors=True)


async def _produce(settings: Settings, values: range) -> None:
    """Send `values` (key = value mod 50), acks=all and idempotent; every send must succeed."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(**kafka_client_kwargs(settings), acks="all",
                                enable_idempotence=True, request_timeout_ms=30_000)
    await producer.start()
    try:
        topic = settings.topic(topics.TRANSACTIONS)
        futures = [await producer.send(topic, key=str(v % 50).encode(), value=str(v).encode())
                   for v in values]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _consume_all(settings: Settings, expected: int, timeout_s: float = 30.0) -> list[int]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(settings.topic(topics.TRANSACTIONS),
                                **kafka_client_kwargs(settings), auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    seen: list[int] = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(seen) < expected and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            seen += [int(r.value) for records in batch.values() for r in records]
    finally:
        await consumer.stop()
    return seen


def _described(settings: Settings, topic: str) -> list[PartitionState]:
    """`topic`'s partitions once the broker asked knows the topic. `ensure_topics` waits until
    the broker its admin client asks shows leaders; each broker gets the controller's metadata
    on its own, so another broker can answer "unknown topic" (no partitions) a moment longer
    (ci9: `describe_topics` on a new admin client, right after `ensure_topics`, found none)."""
    return wait_until(lambda: partitions(settings, [topic]), timeout_s=30, interval_s=0.2,
                      what=f"{topic} known to the broker asked")


def test_three_brokers_and_replicated_topics(cluster: KafkaCluster) -> None:
    settings = cluster.settings
    assert asyncio.run(broker_ids(cluster.bootstrap)) == [1, 2, 3]
    asyncio.run(ensure_topics(settings))
    parts = _described(settings, settings.topic(topics.TRANSACTIONS))
    assert len(parts) == 3
    for p in parts:
        assert len(p.replicas) == 3 and set(p.isr) == {1, 2, 3}, p
    control = _described(settings, settings.topic(topics.CONTROL))
    assert len(control) == 1 and len(control[0].replicas) == 3


def test_leader_sigkilled_mid_produce_loses_nothing(cluster: KafkaCluster) -> None:
    settings = cluster.settings
    asyncio.run(ensure_topics(settings))
    topic = settings.topic(topics.TRANSACTIONS)
    wait_until(lambda: all(len(p.isr) == 3 for p in _described(settings, topic)),
               timeout_s=30, interval_s=0.2, what="every replica in sync before the kill")
    half = MESSAGES // 2
    asyncio.run(_produce(settings, range(0, half)))

    victim = _described(settings, topic)[0].leader
    node = cluster.node(victim)
    pid = node.process.pid()
    assert pid is not None, f"broker {victim} is not ours"
    os.kill(pid, signal.SIGKILL)
    # produce straight on: the sends to the dead leader must be retried on the new one
    asyncio.run(_produce(settings, range(half, MESSAGES)))

    moved = wait_until(
        lambda: (lambda ps: ps if all(p.leader not in (victim, -1) for p in ps) else None)(
            partitions(settings, [topic])),
        timeout_s=30, interval_s=0.2, what=f"leadership to move off broker {victim}")
    for p in moved:
        assert victim not in p.isr and len(p.isr) == 2, p

    seen = asyncio.run(_consume_all(settings, MESSAGES))
    assert len(seen) == MESSAGES, f"{MESSAGES - len(seen)} messages lost or {len(seen)} read"
    assert sorted(seen) == list(range(MESSAGES)), "lost or doubled messages"

    # the killed broker comes back, catches up and rejoins every ISR
    assert node.start()
    node.wait_ready(timeout_s=60)
    wait_until(lambda: all(len(p.isr) == 3 for p in partitions(settings, [topic])),
               timeout_s=60, interval_s=0.2, what=f"broker {victim} back in every ISR")
