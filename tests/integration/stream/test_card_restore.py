"""The card changelog restore against a real broker: newest record per card, offsets held with
the records, and a second restore reads only what was written after them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.stream import cardrecord
from app.stream.carddb import CardDBOptions, open_db
from app.stream.restore import ChangelogRestorer

pytestmark = pytest.mark.integration


class Target:
    """A CardDB-like target over an open database (what the table hands the restorer)."""

    def __init__(self, path: Path) -> None:
        self.db = open_db(path, CardDBOptions())
        self.offsets: dict[int, int] = {}

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return self.db[keys] if keys else []

    def write(self, records: list[tuple[bytes, bytes]], offsets: dict[int, int]) -> None:
        for key, value in records:
            self.db.put(key, value)
        self.offsets.update(offsets)

    def drop(self) -> None:
        raise AssertionError("nothing here is ahead of the changelog")


async def _produce(settings: Settings, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(**kafka_client_kwargs(settings), acks="all")
    await producer.start()
    try:
        for partition, key, value in records:
            await producer.send_and_wait(topic, key=key, value=value, partition=partition)
    finally:
        await producer.stop()


async def _create(settings: Settings, topic: str) -> None:
    admin = AIOKafkaAdminClient(**kafka_client_kwargs(settings))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()


def test_restore_reads_the_newest_record_per_card_then_only_the_tail(
        fresh_settings: Settings, tmp_path: Path) -> None:
    topic = fresh_settings.topic("card_state-changelog")
    asyncio.run(_create(fresh_settings, topic))
    first = [(0, b"a", cardrecord.pack(0, 10, b"a10")), (1, b"b", cardrecord.pack(1, 3, b"b3")),
             (0, b"a", cardrecord.pack(0, 12, b"a12")),
             (0, b"a", cardrecord.pack(0, 11, b"a11")),  # a late write from a lost owner
             (1, b"c", cardrecord.pack(1, 4, b"c4"))]
    asyncio.run(_produce(fresh_settings, topic, first))
    target = Target(tmp_path / "db")
    restorer = ChangelogRestorer(lambda: kafka_client_kwargs(fresh_settings), max_records=2)
    held = asyncio.run(restorer.restore(topic, {0: -1, 1: -1}, target))
    assert held == {0: 2, 1: 1} and target.offsets == {0: 2, 1: 1}
    assert target.db.get(b"a") == cardrecord.pack(0, 12, b"a12")
    assert target.db.get(b"b") == cardrecord.pack(1, 3, b"b3")
    assert restorer.restored == 5 and restorer.skipped_stale == 1

    asyncio.run(_produce(fresh_settings, topic, [(1, b"b", cardrecord.pack(1, 9, b"b9"))]))
    held = asyncio.run(restorer.restore(topic, held, target))
    assert held == {0: 2, 1: 2}
    assert restorer.restored == 6  # the tail only: one record
    assert target.db.get(b"b") == cardrecord.pack(1, 9, b"b9")
    target.db.close()
