"""Card state restore: read only the changelog after the offsets the store holds, in batches.

Faust's recovery hands every changelog record through its consumer, one event at a time
(~7k records/s measured, issue 26). For the card table, just before Faust seeks its changelog
consumer, `CardRecovery` reads each assigned changelog partition itself with a plain aiokafka
consumer, from the offset after the one the store holds (app.stream.carddb) to the end
offset, applying whole fetches at once (one multi-get, one write batch with the new offset).
Faust then finds nothing left to read for actives and follows standbys from there on.

Every record is fenced as Faust's path is (app.stream.cardstore.FencedTable): one behind the
value held for its card, in the same partition, is dropped.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.types import TP

from app.stream import metrics

log = logging.getLogger(__name__)

_POSITION = struct.Struct("<iq")


class RestoreTarget(Protocol):
    """A store the restore writes into (app.stream.carddb.CardDB, or the memory store's adapter)."""

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The values held for `keys` (None where absent)."""

    def write(self, records: Sequence[tuple[bytes, bytes]], offsets: Mapping[int, int]) -> None:
        """Store records and the changelog offset each partition is now held up to, atomically."""

    def drop(self) -> None:
        """Forget everything held (found ahead of the changelog: not to be trusted)."""


class Restorable(Protocol):
    """A table that can restore itself ahead of Faust's recovery (app.stream.cardstore)."""

    restorer: ChangelogRestorer | None

    def restore_target(self) -> RestoreTarget:
        """Where restored records go."""

    def held_offset(self, tp: TP, tracked: int | None) -> int:
        """The last changelog offset of `tp` the store holds (-1: none); `tracked` is Faust's
        own account (what a store without persisted offsets holds)."""


def _behind(candidate: bytes, current: bytes) -> bool:
    """cardrecord.newer, negated, without building records: same partition, older offset."""
    cp, co = _POSITION.unpack_from(candidate)
    hp, ho = _POSITION.unpack_from(current)
    return cp == hp and co < ho


def fence(records: Sequence[Any], target: RestoreTarget | None
          ) -> tuple[list[tuple[bytes, bytes]], int]:
    """The newest record per card among `records` (changelog order) that is not behind the
    value `target` holds (None: it holds nothing of their partition, so none can be);
    returns them and how many were dropped as stale."""
    latest: dict[bytes, bytes] = {}
    stale = 0
    for rec in records:
        value = rec.value
        if value is None:
            continue
        held = latest.get(rec.key)
        if held is not None and _behind(value, held):
            stale += 1
            continue
        latest[rec.key] = value
    if target is None:
        return list(latest.items()), stale
    keys = list(latest)
    kept = []
    for key, held in zip(keys, target.get_many(keys), strict=True):
        value = latest[key]
        if held is not None and _behind(value, held):
            stale += 1
        else:
            kept.append((key, value))
    return kept, stale


class ChangelogRestorer:
    """Reads changelog partitions into a RestoreTarget (see the module)."""

    def __init__(self, client_kwargs: Callable[[], dict[str, Any]], *,
                 max_records: int = 20_000, fetch_bytes: int = 64 << 20) -> None:
        self._client_kwargs = client_kwargs
        self.max_records = max_records
        self.fetch_bytes = fetch_bytes
        self.restored = 0
        self.skipped_stale = 0

    async def restore(self, topic: str, held: Mapping[int, int],
                      target: RestoreTarget) -> dict[int, int]:
        """Bring each partition from `held[p]` (last offset the store holds, -1 for none) to the
        changelog's end offset as of now; returns partition → last offset now held."""
        consumer = AIOKafkaConsumer(**self._client_kwargs(), enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    fetch_max_bytes=self.fetch_bytes,
                                    max_partition_fetch_bytes=self.fetch_bytes // 4)
        await consumer.start()
        t0 = time.monotonic()
        done = dict(held)
        count = 0
        try:
            tps = {p: TopicPartition(topic, p) for p in held}
            consumer.assign(list(tps.values()))
            ends = await consumer.end_offsets(list(tps.values()))
            begins = await consumer.beginning_offsets(list(tps.values()))
            ahead = [p for p, tp in tps.items() if held[p] >= ends[tp]]
            if ahead:
                # the changelog was recreated or truncated under the local state: none of it
                # is trusted (it is a cache of the changelog), everything is read again
                log.warning("card state held past the changelog's end for partitions %s: "
                            "dropped, restoring from the changelog", ahead)
                target.drop()
                held = dict.fromkeys(held, -1)
                done = dict(held)
            todo = set()
            for p, tp in tps.items():
                start = max(held[p] + 1, begins[tp])
                if start < ends[tp]:
                    consumer.seek(tp, start)
                    todo.add(tp)
                else:
                    consumer.pause(tp)
            while todo:
                fetched = await consumer.getmany(*todo, timeout_ms=1000,
                                                 max_records=self.max_records)
                for tp, records in fetched.items():
                    mine = records
                    if records and records[-1].offset >= ends[tp]:  # written since we began
                        mine = [r for r in records if r.offset < ends[tp]]
                    if not mine:
                        continue
                    # looked up even for a partition restored from nothing: an earlier fetch
                    # of this same restore may hold a newer record than a late one here
                    kept, stale = fence(mine, target)
                    target.write(kept, {tp.partition: mine[-1].offset})
                    done[tp.partition] = mine[-1].offset
                    count += len(mine)
                    self.skipped_stale += stale
                for tp in list(todo):
                    if await consumer.position(tp) >= ends[tp]:
                        todo.discard(tp)
                        consumer.pause(tp)
        finally:
            await consumer.stop()
        self.restored += count
        metrics.CARDS_RESTORED.inc(count)
        took = time.monotonic() - t0
        if count:
            log.info("card state: restored %d changelog records of %d partitions in %.2fs "
                     "(%.0f records/s)", count, len(held), took, count / max(took, 1e-9))
        return done


class CardRecovery(Recovery):
    """Faust's table recovery, with the card table's changelog read ahead by its restorer."""

    async def _seek_offsets(self, consumer: Any, tps: set[TP], offsets: Any,
                            title: str) -> None:
        by_table: dict[Any, dict[int, int]] = {}
        for tp in tps:
            table = self.tp_to_table.get(tp)
            if getattr(table, "restorer", None) is not None:
                by_table.setdefault(table, {})[tp.partition] = table.held_offset(tp, offsets[tp])
        for table, held in by_table.items():
            topic = table.changelog_topic.get_topic_name()
            done = await table.restorer.restore(topic, held, table.restore_target())
            for partition, offset in done.items():
                offsets[TP(topic, partition)] = offset
        await super()._seek_offsets(consumer, tps, offsets, title)


class CardTableManager(TableManager):
    """The app's table manager, with CardRecovery (`App(TableManager=...)`)."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = CardRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery
