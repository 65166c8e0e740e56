"""A block-list entry added and then removed while a log streams through the worker: every
transaction of the card is decided by the list exactly from the first message the worker decided
with the entry, and by the model again exactly from the first decided after its removal (the
worker's debug page says where each source partition switched)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from app.control.publisher import ControlPublisher
from app.harness.pipeline import (
    lines_of,
    make_log,
    read,
    replay,
    require_compiled_fold,
    served_rows,
    wait_drained,
)
from app.harness.procs import Spawned, spawn_worker, wait_all_assigned, wait_until
from app.kafka import topics
from app.kafka.inspect import topic_sizes
from app.scoring.lists import ListEntry
from app.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _switch(settings: Settings, worker: Spawned, change: str, card: str, partition: int) -> int:
    """Publish `change` ("put" or "remove") for `card`; the first source offset of `partition`
    the worker decided with it."""

    async def publish() -> int:
        async with ControlPublisher(settings) as pub:
            if change == "put":
                now = time.time_ns() // 1_000_000
                return await pub.put(ListEntry("block", "card", card, "mule", "test", now))
            return await pub.remove("card", card)

    offset = asyncio.run(publish())

    def switched() -> int | None:
        lists = worker.debug("consumer")["lists"]
        if lists["control_offset"] <= offset:
            return None
        return lists["decided_from"].get(str(partition))

    return wait_until(switched, timeout_s=60, interval_s=0.05,
                      what=f"the worker to decide a message of partition {partition} after {change}")


def test_a_block_entry_added_then_removed_mid_stream_switches_exactly_where_read(
        fresh_settings: Settings, tmp_path: Path) -> None:
    require_compiled_fold()
    settings = fresh_settings
    log = make_log(cards=30, txns=5000, seed=58)
    lines = lines_of(log)
    card, _ = Counter(orjson.loads(x)["card_id"] for x in lines).most_common(1)[0]
    served_topic = settings.topic(topics.FEATURES_SERVED)
    worker = spawn_worker(settings, tmp_path, dispatch=False)
    try:
        wait_all_assigned([worker], settings.topic(topics.TRANSACTIONS))
        fed: list[int] = []
        feeder = threading.Thread(target=lambda: fed.append(replay(settings, lines, rate=500)))
        feeder.start()

        def served_at_least(n: int) -> bool:
            return asyncio.run(topic_sizes(settings, [served_topic]))[served_topic] >= n

        wait_until(lambda: served_at_least(len(lines) // 4), timeout_s=120,
                   what="a quarter of the log served")
        mine = [r for r in served_rows(settings) if r["card_id"] == card]
        assert mine, "the card has not been served yet"
        partition = int(mine[0]["partition"])
        on_from = _switch(settings, worker, "put", card, partition)
        wait_until(lambda: served_at_least(len(lines) * 6 // 10), timeout_s=120,
                   what="60 % of the log served")
        off_from = _switch(settings, worker, "remove", card, partition)
        feeder.join(timeout=120)
        assert fed, "the replay did not finish"
        wait_drained(settings, [worker], expected=fed[0], timeout_s=240)
    finally:
        worker.stop()
    rows = sorted((int(r["offset"]), r["txn_id"]) for r in served_rows(settings)
                  if r["card_id"] == card)
    blocked = {a["txn_id"] for a in map(orjson.loads, (r.value for r in read(settings,
                                                                               topics.ACTIONS)))
               if a["card_id"] == card and a["decided_by"] == "block_list"}
    expected = {txn for offset, txn in rows if on_from <= offset < off_from}
    before = [txn for offset, txn in rows if offset < on_from]
    after = [txn for offset, txn in rows if offset >= off_from]
    assert expected and before and after, (on_from, off_from, len(rows))
    assert blocked == expected, (f"decided by the block list: {len(blocked)}, expected "
                                 f"{len(expected)} (from offset {on_from} to {off_from}); "
                                 f"extra {sorted(blocked - expected)[:5]}, "
                                 f"missing {sorted(expected - blocked)[:5]}")
