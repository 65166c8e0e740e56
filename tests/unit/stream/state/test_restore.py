"""The changelog restore's fence: the newest record per card, never one behind what is held."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import SimpleNamespace

from aiokafka import TopicPartition
from faust.types import TP

from app.stream.state import cardrecord
from app.stream.state.recovery import standby_lag
from app.stream.state.restore import ChangelogRestorer, fence, fence_fresh


class Held:
    offsets_cover_records = False

    def __init__(self, data: dict[bytes, bytes]) -> None:
        self.data = data

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.data.get(k) for k in keys]

    def write(self, records: Sequence[tuple[bytes, bytes]], offsets: Mapping[int, int], *,
              logged: bool = True) -> None:
        self.data.update(records)

    def flush(self) -> None:
        pass

    def drop(self) -> None:
        self.data.clear()


def rec(key: bytes, partition: int, offset: int, state: bytes = b"s") -> SimpleNamespace:
    return SimpleNamespace(key=key, value=cardrecord.pack(partition, offset, state))


def test_the_newest_record_per_card_wins_and_a_late_older_one_is_dropped() -> None:
    kept, stale = fence([rec(b"a", 1, 10), rec(b"b", 1, 11), rec(b"a", 1, 30),
                         rec(b"a", 1, 20)], Held({}))
    assert dict(kept) == {b"a": cardrecord.pack(1, 30, b"s"), b"b": cardrecord.pack(1, 11, b"s")}
    assert stale == 1


def test_a_record_behind_the_held_value_is_dropped_another_partitions_replaces_it() -> None:
    held = Held({b"a": cardrecord.pack(1, 50, b"h"), b"b": cardrecord.pack(2, 50, b"h")})
    kept, stale = fence([rec(b"a", 1, 40), rec(b"b", 1, 5), rec(b"c", 1, 1)], held)
    assert dict(kept) == {b"b": cardrecord.pack(1, 5, b"s"), b"c": cardrecord.pack(1, 1, b"s")}
    assert stale == 1


def test_a_fresh_partition_is_fenced_by_what_the_restore_read_before() -> None:
    seen: dict[bytes, int] = {}
    first = fence_fresh([rec(b"a", 3, 10), rec(b"b", 3, 11)], 3, seen)
    assert first is not None and dict(first[0]) == {b"a": cardrecord.pack(3, 10, b"s"),
                                                     b"b": cardrecord.pack(3, 11, b"s")}
    # a later fetch: a is behind what an earlier fetch held (a late write of a lost owner)
    second = fence_fresh([rec(b"a", 3, 9), rec(b"b", 3, 12), rec(b"b", 3, 12, b"t")], 3, seen)
    assert second is not None
    kept, stale = second
    assert dict(kept) == {b"b": cardrecord.pack(3, 12, b"t")} and stale == 1
    assert seen == {b"a": 10, b"b": 12}


def test_a_record_naming_another_partition_leaves_the_fence_to_the_store() -> None:
    assert fence_fresh([rec(b"a", 3, 10), rec(b"b", 4, 1)], 3, {}) is None


def test_standby_lag_counts_a_partition_nothing_was_read_of() -> None:
    a, b, c = TP("cl", 0), TP("cl", 1), TP("cl", 2)
    recovery = SimpleNamespace(standby_highwaters={a: 99, b: 49, c: -1},
                               standby_offsets={a: -1, b: 60, c: -1})
    assert standby_lag(recovery) == 100  # a: all 100 records; b: caught up; c: empty


async def test_a_client_that_never_starts_is_noted_among_the_last_ten_reasons() -> None:
    """Each restore whose raw reader cannot start notes why; a broker that stays unreachable
    across many restores (every rebalance restores) must not grow the list for ever."""
    from app.stream.state.restore import ChangelogRestorer

    restorer = ChangelogRestorer(lambda: {"bootstrap_servers": "127.0.0.1:1",
                                          "request_timeout_ms": 200})
    for _ in range(12):
        assert await restorer._raw_reader(
            {"bootstrap_servers": "127.0.0.1:1", "request_timeout_ms": 200}, "t") is None
    assert len(restorer.handed_over) == 10
    assert all(why.startswith("t: KafkaConnectionError") for why in restorer.handed_over)


class FetchLog:
    """An aiokafka consumer's part `ChangelogRestorer._consume` uses, over fixed logs: each
    `getmany` hands out up to two records of every partition asked for (a commit marker at a
    log's end is passed without a record, as read_committed does)."""

    def __init__(self, logs: dict[TopicPartition, list[int]], ends: dict[TopicPartition, int]
                 ) -> None:
        self.logs, self.ends = logs, ends
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self.asked: list[set[TopicPartition]] = []

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    async def getmany(self, *tps: TopicPartition, timeout_ms: int, max_records: int
                      ) -> dict[TopicPartition, list[SimpleNamespace]]:
        assert not self.paused.intersection(tps), "a paused partition was fetched"
        self.asked.append(set(tps))
        out = {}
        for tp in tps:
            offsets = [o for o in self.logs[tp] if o >= self.positions[tp]][:2]
            if offsets:
                out[tp] = [SimpleNamespace(key=b"k%d" % o, offset=o) for o in offsets]
                self.positions[tp] = offsets[-1] + 1
            else:  # only the marker is left
                self.positions[tp] = self.ends[tp]
        return out


class Loaded:
    def __init__(self) -> None:
        self.offsets: list[int] = []

    def apply(self, records: Sequence[SimpleNamespace]) -> None:
        self.offsets.extend(r.offset for r in records)


def test_the_consumer_reads_every_partition_left_at_once_each_to_its_own_end() -> None:
    # one fetch round for all partitions, not one partition after the other: a rebalance's
    # hand-over in exactly_once waited ~0.1 s per partition restored one by one
    a, b, c = (TopicPartition("changelog", p) for p in range(3))
    log = FetchLog({a: [5, 6, 7, 8], b: [0, 1], c: [3, 4, 5, 9]}, {a: 10, b: 3, c: 10})
    loads = {tp: Loaded() for tp in (a, b, c)}
    rest = {a: (5, 10, loads[a]), b: (0, 3, loads[b]), c: (3, 6, loads[c])}
    restorer = ChangelogRestorer(dict)
    asyncio.run(restorer._consume(log, rest))  # type: ignore[arg-type]  # noqa: SLF001
    assert log.asked[0] == {a, b, c}
    assert len(log.asked) == 3  # a's four records two at a time, then its marker
    assert loads[a].offsets == [5, 6, 7, 8]
    assert loads[b].offsets == [0, 1]
    assert loads[c].offsets == [3, 4, 5]  # 9 was written after the restore began: not read
    assert log.paused == {a, b, c}
