"""`replay_messages` against a real broker: every message once, file order per partition, pacing."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import orjson
import pytest

from app.harness.pipeline import lines_of, make_log, read
from app.kafka import topics
from app.kafka.replay import replay_messages
from app.kafka.sink import partition_for
from app.settings import Settings
from app.transactions.logfile import card_key
from tests.support.partitioner import KAFKA_DEFAULT_PARTITIONS

pytestmark = pytest.mark.integration


def _log_with_keyless(txns: int) -> list[bytes]:
    lines = lines_of(make_log(cards=30, txns=txns, seed=5))
    # messages without a readable card_id go by a hash of their bytes, not to a random partition
    return lines[:50] + [b"not json at all", b'{"card_id": 17}'] + lines[50:]


def _assert_delivered_in_order(settings: Settings, lines: list[bytes]) -> list[int]:
    records = read(settings, topics.TRANSACTIONS)
    assert sorted(r.value for r in records) == sorted(lines)  # each exactly once
    expected: dict[int, list[bytes]] = defaultdict(list)
    for line in lines:
        expected[partition_for(card_key(line), line, settings.topic_partitions)].append(line)
    got: dict[int, list[bytes]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        got[r.partition].append(r.value)
        assert r.key == card_key(r.value)
    assert got == expected  # keyed as the worker keys its outputs, in file order per partition
    return [r.timestamp_ms for r in records]


def test_paced_replay_keeps_file_order_and_never_runs_ahead_of_the_rate(
    fresh_settings: Settings,
) -> None:
    lines = _log_with_keyless(800)
    rate = 2_000.0
    report = asyncio.run(replay_messages(fresh_settings, lines, rate=rate))
    assert (report.sent, report.errors) == (len(lines), 0)
    stamps = _assert_delivered_in_order(fresh_settings, lines)
    # message i is not produced before i / rate: the last one no earlier than (n - 1) / rate
    # after the first (a step's records share one timestamp; 10 ms of slack for rounding)
    assert max(stamps) - min(stamps) >= (len(lines) - 1) / rate * 1000 - 10


def test_unpaced_replay_of_a_generator_with_a_small_window(fresh_settings: Settings) -> None:
    lines = _log_with_keyless(3_000)
    progress: list[int] = []
    report = asyncio.run(replay_messages(fresh_settings, iter(lines), window=700,
                                         on_progress=progress.append))
    assert (report.sent, report.errors) == (len(lines), 0)
    _assert_delivered_in_order(fresh_settings, lines)
    # at most 700 in flight: drained after every 700 handed over, then once at the end
    assert progress[: len(lines) // 700] == [700 * (i + 1) for i in range(len(lines) // 700)]
    assert progress[-1] == len(lines)


def test_replayed_keys_land_where_kafkas_default_partitioner_puts_them(
    fresh_settings: Settings,
) -> None:
    """Pinned to known values (Kafka's murmur2 test vectors), not to partition_for itself."""
    n = fresh_settings.topic_partitions
    known = {key.decode(): p for key, count, p in KAFKA_DEFAULT_PARTITIONS if count == n}
    assert len(known) >= 4, f"no known values for {n} partitions"
    lines = [orjson.dumps({"txn_id": f"t{i}", "card_id": card}) for i, card in enumerate(known)]
    report = asyncio.run(replay_messages(fresh_settings, lines))
    assert (report.sent, report.errors) == (len(lines), 0)
    got = {orjson.loads(r.value)["card_id"]: r.partition
           for r in read(fresh_settings, topics.TRANSACTIONS)}
    assert got == known
