"""Card state restore: read only the changelog after the offsets the store holds, in batches.

Faust's recovery hands every changelog record through its consumer, one event at a time (about 7k
records/s). For the card table, just before Faust seeks its changelog consumer, `CardRecovery`
(app.stream.state.recovery) reads each assigned changelog partition itself with a plain aiokafka
consumer, from the offset after the one the store holds (app.stream.state.carddb) to the end
offset, applying whole fetches at once (one write batch with the new offset): the raw reader one
partition after the other, the consumer (exactly_once, or where the raw reader stops) every
partition left at once. Faust then finds nothing left to read for actives and follows standbys from
there on.

Every record is fenced as Faust's path is (app.stream.state.cardstore.FencedTable): one behind the
value held for its card, in the same partition, is dropped. A card's record goes to the
changelog partition of the source partition its position names (app.stream.engine.pipeline), and
every store write of a partition's records carries that partition's offset, so for a
partition the store holds nothing of, only records read earlier in the same restore can be
ahead of a record: those are kept in memory (card → offset, bounded by `max_fenced`) and the
store is not read at all. A record that breaks that rule, or a partition past the bound, is
fenced against the store (one multi-get per fetch), as a partition restored from an offset is.

A restore's writes skip the store's write-ahead log and the restore flushes the store before
it returns or fails: a crash meanwhile loses a prefix-consistent tail of them (records and
offsets together), and nothing written with the log afterwards can land ahead of them.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition

from app.kafka.topicid import topic_ids
from app.stream import metrics
from app.stream.state.changelogread import RawReader, Unusual
from app.stream.state.store import RestoreTarget

log = logging.getLogger(__name__)

_POSITION = struct.Struct("<iq")


def _behind(candidate: bytes, current: bytes) -> bool:
    """cardrecord.newer, negated, without building records: same partition, older offset."""
    cp, co = _POSITION.unpack_from(candidate)
    hp, ho = _POSITION.unpack_from(current)
    return cp == hp and co < ho


def fence(records: Sequence[Any], target: RestoreTarget
          ) -> tuple[list[tuple[bytes, bytes]], int]:
    """The newest record per card among `records` (changelog order) that is not behind the
    value `target` holds; returns them and how many were dropped as stale."""
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
    keys = list(latest)
    kept = []
    for key, held in zip(keys, target.get_many(keys), strict=True):
        value = latest[key]
        if held is not None and _behind(value, held):
            stale += 1
        else:
            kept.append((key, value))
    return kept, stale


def fence_fresh(records: Sequence[Any], partition: int, seen: dict[bytes, int]
                ) -> tuple[Iterable[tuple[bytes, bytes]], int] | None:
    """`fence` for a changelog partition the store holds nothing of: against the offsets of
    `partition` read earlier in the same restore (`seen`, updated), never the store. None when
    a record names another source partition: `seen` is then no longer complete (drop it, and
    fence with the store)."""
    latest: dict[bytes, bytes] = {}
    stale = 0
    unpack = _POSITION.unpack_from
    for rec in records:
        value = rec.value
        if value is None:
            continue
        source, offset = unpack(value)
        if source != partition:
            return None
        key = rec.key
        before = seen.get(key)
        if before is not None and offset < before:
            stale += 1
            continue
        seen[key] = offset
        latest[key] = value
    return latest.items(), stale


class _Load:
    """One partition's records on their way into the target: fenced, written, counted."""

    def __init__(self, tp: TopicPartition, target: RestoreTarget, *, fresh: bool,
                 max_fenced: int) -> None:
        self.partition = tp.partition
        self.target = target
        self.seen: dict[bytes, int] | None = {} if fresh else None
        self.max_fenced = max_fenced
        self.last = -1
        self.count = 0
        self.stale = 0

    def apply(self, records: Sequence[Any]) -> None:
        """Fence and write `records` (changelog order, one partition), with their offset."""
        if not records:
            return
        result = None
        if self.seen is not None and len(self.seen) < self.max_fenced:
            result = fence_fresh(records, self.partition, self.seen)
        if result is None:
            self.seen = None
            result = fence(records, self.target)
        kept, stale = result
        self.last = records[-1].offset
        self.target.write(kept, {self.partition: self.last}, logged=False)
        self.count += len(records)
        self.stale += stale


class ChangelogRestorer:
    """Reads changelog partitions into a RestoreTarget (see the module)."""

    def __init__(self, client_kwargs: Callable[[], dict[str, Any]], *,
                 max_records: int = 20_000, fetch_bytes: int = 64 << 20,
                 max_fenced: int = 2_000_000, raw_fetch: bool = True,
                 isolation_level: str = "read_uncommitted") -> None:
        self._client_kwargs = client_kwargs
        #: read_committed in exactly_once: aborted transactions' records are never applied
        #: (the raw reader does not filter them: it must be off then), and the end offset is
        #: the last stable one
        self.isolation_level = isolation_level
        #: the consumer's longest wait for a fetch (see `_consume`)
        self.poll_ms = 50
        self.max_records = max_records
        #: cards of one partition whose offsets a restore from nothing keeps in memory (~120
        #: bytes each while it runs); past it the rest of the partition is fenced by the store
        self.max_fenced = max_fenced
        self.fetch_bytes = fetch_bytes
        #: read with `RawReader` first (False: aiokafka's consumer only)
        self.raw_fetch = raw_fetch
        self.restored = 0
        #: changelog partition → records restored into it since start (a restart on its own
        #: store reads only each partition's tail: at most what was written since the crash)
        self.restored_by_partition: dict[int, int] = {}
        self.skipped_stale = 0
        #: partitions the raw reader handed over to the consumer, and why (last few)
        self.handed_over: list[str] = []

    async def restore(self, topic: str, held: Mapping[int, int],
                      target: RestoreTarget) -> dict[int, int]:
        """Bring each partition from `held[p]` (last offset the store holds, -1 for none) to the
        changelog's end offset as of now; returns partition → last offset now held."""
        kwargs = self._client_kwargs()
        consumer = AIOKafkaConsumer(**kwargs, enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    isolation_level=self.isolation_level,
                                    # a partition read to its end leaves a fetch at the end in
                                    # flight, and the next partition's fetch waits behind it:
                                    # the broker holds such a fetch this long, not 500 ms
                                    fetch_max_wait_ms=10,
                                    fetch_max_bytes=self.fetch_bytes,
                                    max_partition_fetch_bytes=self.fetch_bytes // 4)
        await consumer.start()
        t0 = time.monotonic()
        done: dict[int, int] = {}
        count = 0
        raw = None
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
            consumer.pause(*tps.values())
            raw = await self._raw_reader(kwargs, topic)
            loads: list[_Load] = []
            rest: dict[TopicPartition, tuple[int, int, _Load]] = {}
            for p, tp in sorted(tps.items()):
                begin = max(held[p] + 1, begins[tp])
                if begin < ends[tp]:
                    fresh = held[p] < 0 and target.offsets_cover_records
                    load = _Load(tp, target, fresh=fresh, max_fenced=self.max_fenced)
                    loads.append(load)
                    if raw is not None:
                        begin = await self._raw_read(raw, tp, begin, ends[tp], load)
                    if begin < ends[tp]:
                        rest[tp] = (begin, ends[tp], load)
                # read up to the end: the offsets below it are held, records or not (a
                # transactional changelog ends in a commit marker no consumer is handed)
                done[p] = ends[tp] - 1
            await self._consume(consumer, rest)
            count = sum(load.count for load in loads)
            self.skipped_stale += sum(load.stale for load in loads)
        finally:
            try:
                target.flush()
            finally:
                try:
                    if raw is not None:
                        await raw.client.close()
                finally:
                    await consumer.stop()
        self.restored += count
        for load in loads:
            self.restored_by_partition[load.partition] = (
                self.restored_by_partition.get(load.partition, 0) + load.count)
        metrics.CARDS_RESTORED.inc(count)
        took = time.monotonic() - t0
        if count:
            log.info("card state: restored %d changelog records of %d partitions in %.2fs "
                     "(%.0f records/s)", count, len(held), took, count / max(took, 1e-9))
        return done

    async def topic_id(self, topic: str) -> str | None:
        """`topic`'s Kafka topic id (app.kafka.topicid); None where the broker gives none
        (Kafka < 2.8) or does not answer (logged: the store's offsets alone are checked)."""
        client = AIOKafkaClient(**self._client_kwargs())
        try:
            await client.bootstrap()
            return (await topic_ids(client, [topic])).get(topic)
        except Exception as exc:  # noqa: BLE001 - the offsets still catch a recreated topic
            log.warning("topic id of %s not read (%r): the card store is checked by its "
                        "offsets only", topic, exc)
            return None
        finally:
            await client.close()

    async def _raw_reader(self, kwargs: dict[str, Any], topic: str) -> RawReader | None:
        if not self.raw_fetch:
            return None
        client = None
        try:
            client = AIOKafkaClient(**kwargs)
            await client.bootstrap()
            await client.add_topic(topic)
        except Exception as exc:  # the consumer alone reads, as it did before
            self._hand_over(f"{topic}: {exc!r}")
            log.warning("card state restore: %s read by the consumer: %r", topic, exc)
            if client is not None:
                await client.close()
            return None
        return RawReader(client, self.fetch_bytes // 4)

    def _hand_over(self, why: str) -> None:
        """Note why the consumer reads instead of the raw reader (the last ten reasons)."""
        self.handed_over = [*self.handed_over[-9:], why]

    async def _raw_read(self, raw: RawReader, tp: TopicPartition, begin: int, end: int,
                        load: _Load) -> int:
        """Read `tp` from `begin` towards `end` with the raw reader: where it stopped (`end`,
        or where it handed the rest over to the consumer)."""
        try:
            return await raw.read(tp, begin, end, load)
        except Unusual as exc:
            why, begin = exc.args
            self._hand_over(f"{tp.topic}[{tp.partition}]@{begin}: {why}")
            log.warning("card state restore: %s[%d] from offset %d read by the consumer: %s",
                        tp.topic, tp.partition, begin, why)
            return begin

    async def _consume(self, consumer: AIOKafkaConsumer,
                       rest: dict[TopicPartition, tuple[int, int, _Load]]) -> None:
        """Read every partition of `rest` (tp → begin, end exclusive, its load) with the
        consumer, all at once: one partition after the other cost a few fetch round trips each
        (exactly_once's changelogs end in a commit marker, passed by a fetch of its own), ~0.1 s
        a partition in a rebalance's hand-over. Each partition's records go to its own load in
        changelog order."""
        reading = dict(rest)
        for tp, (begin, _, _) in reading.items():
            consumer.seek(tp, begin)
        if reading:
            consumer.resume(*reading)
        try:
            while reading:
                # short waits: a fetch of only commit markers or aborted records (exactly_once)
                # moves the position but hands out nothing, and a long wait would sit it out
                fetched = await consumer.getmany(*reading, timeout_ms=self.poll_ms,
                                                 max_records=self.max_records)
                for tp, records in fetched.items():
                    _, end, load = reading[tp]
                    if records and records[-1].offset >= end:  # written since we began
                        records = [r for r in records if r.offset < end]
                    load.apply(records)
                for tp in list(reading):
                    if await consumer.position(tp) >= reading[tp][1]:
                        consumer.pause(tp)
                        del reading[tp]
        finally:
            if reading:
                consumer.pause(*reading)
