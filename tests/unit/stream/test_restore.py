"""The changelog restore's fence: the newest record per card, never one behind what is held."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace

from faust.types import TP

from app.stream import cardrecord
from app.stream.restore import fence, fence_fresh, standby_lag


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
    from app.stream.restore import ChangelogRestorer

    restorer = ChangelogRestorer(lambda: {"bootstrap_servers": "127.0.0.1:1",
                                          "request_timeout_ms": 200})
    for _ in range(12):
        assert await restorer._raw_reader(
            {"bootstrap_servers": "127.0.0.1:1", "request_timeout_ms": 200}, "t") is None
    assert len(restorer.handed_over) == 10
    assert all(why.startswith("t: KafkaConnectionError") for why in restorer.handed_over)
