"""The card changelog restore against a real broker: newest record per card, offsets held with
the records, a second restore reads only what was written after them; the raw batch reader and
aiokafka's consumer agree, and the consumer takes over wherever the raw reader stops."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.stream.state import cardrecord, changelogread
from app.stream.state.carddb import CardDBOptions, open_db
from app.stream.state.restore import ChangelogRestorer

pytestmark = pytest.mark.integration


class Target:
    """A CardDB-like target over an open database (what the table hands the restorer)."""

    offsets_cover_records = True

    def __init__(self, path: Path) -> None:
        self.db = open_db(path, CardDBOptions())
        self.offsets: dict[int, int] = {}
        self.reads: list[bytes] = []
        self.flushes = 0

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        self.reads.extend(keys)
        return self.db[keys] if keys else []

    def write(self, records: list[tuple[bytes, bytes]], offsets: dict[int, int], *,
              logged: bool = True) -> None:
        for key, value in records:
            self.db.put(key, value)
        self.offsets.update(offsets)

    def flush(self) -> None:
        self.flushes += 1
        self.db.flush(True)

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


FIRST = [(0, b"a", cardrecord.pack(0, 10, b"a10")), (1, b"b", cardrecord.pack(1, 3, b"b3")),
         (0, b"a", cardrecord.pack(0, 12, b"a12")),
         (0, b"a", cardrecord.pack(0, 11, b"a11")),  # a late write from a lost owner
         (1, b"c", cardrecord.pack(1, 4, b"c4"))]


@pytest.mark.parametrize("raw_fetch", [True, False], ids=["raw-batches", "consumer"])
def test_restore_reads_the_newest_record_per_card_then_only_the_tail(
        fresh_settings: Settings, tmp_path: Path, raw_fetch: bool) -> None:
    topic = fresh_settings.topic("card_state-changelog")
    asyncio.run(_create(fresh_settings, topic))
    asyncio.run(_produce(fresh_settings, topic, FIRST))
    target = Target(tmp_path / "db")
    restorer = ChangelogRestorer(lambda: kafka_client_kwargs(fresh_settings), max_records=2,
                                 raw_fetch=raw_fetch)
    held = asyncio.run(restorer.restore(topic, {0: -1, 1: -1}, target))
    assert held == {0: 2, 1: 1} and target.offsets == {0: 2, 1: 1}
    assert target.db.get(b"a") == cardrecord.pack(0, 12, b"a12")
    assert target.db.get(b"b") == cardrecord.pack(1, 3, b"b3")
    assert restorer.restored == 5 and restorer.skipped_stale == 1
    # restored from nothing: fenced against what this restore read, the store never read
    assert target.reads == [] and target.flushes == 1
    assert restorer.handed_over == []

    asyncio.run(_produce(fresh_settings, topic, [(1, b"b", cardrecord.pack(1, 9, b"b9")),
                                                 (1, b"c", cardrecord.pack(1, 2, b"c2"))]))
    held = asyncio.run(restorer.restore(topic, held, target))
    assert held == {0: 2, 1: 3}
    assert restorer.restored == 7  # the tail only: two records
    assert target.db.get(b"b") == cardrecord.pack(1, 9, b"b9")
    # from an offset: fenced against the store (c at 4 is held, c at 2 is behind it)
    assert target.db.get(b"c") == cardrecord.pack(1, 4, b"c4")
    assert sorted(target.reads) == [b"b", b"c"] and restorer.skipped_stale == 2
    target.db.close()


def test_a_record_of_another_partition_is_fenced_against_the_store(
        fresh_settings: Settings, tmp_path: Path) -> None:
    """A restore from nothing trusts its in-memory fence only while every record names its own
    partition; one that does not sends the rest of the partition to the store's fence."""
    topic = fresh_settings.topic("card_state-changelog")
    asyncio.run(_create(fresh_settings, topic))
    target = Target(tmp_path / "db")
    target.db.put(b"x", cardrecord.pack(1, 50, b"x50"))  # held from partition 1's log
    asyncio.run(_produce(fresh_settings, topic, [
        (0, b"a", cardrecord.pack(0, 1, b"a1")), (0, b"x", cardrecord.pack(1, 40, b"x40"))]))
    restorer = ChangelogRestorer(lambda: kafka_client_kwargs(fresh_settings))
    asyncio.run(restorer.restore(topic, {0: -1}, target))
    assert target.db.get(b"x") == cardrecord.pack(1, 50, b"x50")
    assert target.db.get(b"a") == cardrecord.pack(0, 1, b"a1")
    assert b"x" in target.reads and restorer.skipped_stale == 1
    target.db.close()


def test_the_consumer_takes_over_where_the_raw_reader_stops(
        fresh_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = fresh_settings.topic("card_state-changelog")
    asyncio.run(_create(fresh_settings, topic))
    records = [(0, b"k%03d" % (i % 40), cardrecord.pack(0, i, b"v%d" % i)) for i in range(300)]
    asyncio.run(_produce(fresh_settings, topic, records))
    fetch = changelogread.RawReader._fetch
    calls = 0

    async def fails_on_the_second_fetch(self: Any, tp: Any, offset: int) -> bytes:
        nonlocal calls
        calls += 1
        if calls >= 2:
            raise changelogread.Unusual("NotLeaderForPartitionError")
        return await fetch(self, tp, offset)

    monkeypatch.setattr(changelogread.RawReader, "_fetch", fails_on_the_second_fetch)
    # small fetches: the first response holds only part of the partition
    restorer = ChangelogRestorer(lambda: kafka_client_kwargs(fresh_settings), fetch_bytes=4096)
    target = Target(tmp_path / "db")
    held = asyncio.run(restorer.restore(topic, {0: -1}, target))
    assert held == {0: 299} and restorer.restored == 300
    assert len(restorer.handed_over) == 1 and "NotLeader" in restorer.handed_over[0]
    offset = int(restorer.handed_over[0].split("@")[1].split(":")[0])
    assert 0 < offset < 300  # the raw reader applied a part, the consumer the rest
    for i in range(260, 300):
        assert target.db.get(b"k%03d" % (i % 40)) == cardrecord.pack(0, i, b"v%d" % i)
    target.db.close()


def test_the_memory_store_is_fenced_by_what_it_holds_whatever_its_offsets_say(
        fresh_settings: Settings) -> None:
    """Faust's tracked offset can read -1 for a partition whose cards the memory store still
    holds (assigned again in the same process): those are read, never trusted away."""
    from types import SimpleNamespace

    from app.stream.state.memory import MemoryTarget

    topic = fresh_settings.topic("card_state-changelog")
    asyncio.run(_create(fresh_settings, topic))
    asyncio.run(_produce(fresh_settings, topic, [(0, b"a", cardrecord.pack(0, 40, b"a40")),
                                                 (0, b"b", cardrecord.pack(0, 41, b"b41"))]))
    data = {b"a": cardrecord.pack(0, 50, b"a50")}
    target = MemoryTarget(SimpleNamespace(data=data))
    restorer = ChangelogRestorer(lambda: kafka_client_kwargs(fresh_settings))
    asyncio.run(restorer.restore(topic, {0: -1}, target))
    assert data == {b"a": cardrecord.pack(0, 50, b"a50"), b"b": cardrecord.pack(0, 41, b"b41")}
    assert restorer.skipped_stale == 1


async def _produce_in_transactions(settings: Settings, topic: str,
                                   txns: list[tuple[bool, list[tuple[int, bytes, bytes]]]]
                                   ) -> None:
    """Each (commit?, records) in one transaction of its own, committed or aborted."""
    producer = AIOKafkaProducer(**kafka_client_kwargs(settings), acks="all",
                                transactional_id=f"{topic}-writer")
    await producer.start()
    try:
        for commit, records in txns:
            await producer.begin_transaction()
            for partition, key, value in records:
                await producer.send_and_wait(topic, key=key, value=value, partition=partition)
            await (producer.commit_transaction() if commit else producer.abort_transaction())
    finally:
        await producer.stop()


def test_exactly_once_restores_committed_records_only_and_holds_up_to_the_last_marker(
        fresh_settings: Settings, tmp_path: Path) -> None:
    """A transactional changelog (exactly_once): an aborted transaction's records are never
    applied, and the partition counts as read up to its end offset although its last offset is
    a commit marker no consumer is handed (Faust would otherwise wait for it for ever)."""
    topic = fresh_settings.topic("card_state-changelog")
    asyncio.run(_create(fresh_settings, topic))
    asyncio.run(_produce_in_transactions(fresh_settings, topic, [
        (True, [(0, b"a", cardrecord.pack(0, 10, b"a10")), (1, b"b", cardrecord.pack(1, 3, b"b3"))]),
        (False, [(0, b"a", cardrecord.pack(0, 11, b"aborted"))]),  # a fenced owner's
        (True, [(1, b"b", cardrecord.pack(1, 5, b"b5"))]),
    ]))
    target = Target(tmp_path / "db")
    restorer = ChangelogRestorer(lambda: kafka_client_kwargs(fresh_settings),
                                 isolation_level="read_committed", raw_fetch=False)
    held = asyncio.run(restorer.restore(topic, {0: -1, 1: -1}, target))
    assert target.db.get(b"a") == cardrecord.pack(0, 10, b"a10")
    assert target.db.get(b"b") == cardrecord.pack(1, 5, b"b5")
    assert restorer.restored == 3
    # partition 0: a10 @0, marker @1, aborted @2, marker @3; partition 1: b3 @0, marker @1,
    # b5 @2, marker @3: the store holds the last records, the restore reports the ends
    assert target.offsets == {0: 0, 1: 2} and held == {0: 3, 1: 3}
    # a second restore from what the store holds reads nothing more
    assert asyncio.run(restorer.restore(topic, target.offsets, target)) == {0: 3, 1: 3}
    assert restorer.restored == 3
    target.db.close()
