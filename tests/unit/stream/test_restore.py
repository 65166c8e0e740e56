"""The changelog restore's fence: the newest record per card, never one behind what is held."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace

from app.stream import cardrecord
from app.stream.restore import fence


class Held:
    def __init__(self, data: dict[bytes, bytes]) -> None:
        self.data = data

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.data.get(k) for k in keys]

    def write(self, records: Sequence[tuple[bytes, bytes]], offsets: Mapping[int, int]) -> None:
        self.data.update(records)

    def drop(self) -> None:
        self.data.clear()


def rec(key: bytes, partition: int, offset: int, state: bytes = b"s") -> SimpleNamespace:
    return SimpleNamespace(key=key, value=cardrecord.pack(partition, offset, state))


def test_the_newest_record_per_card_wins_and_a_late_older_one_is_dropped() -> None:
    kept, stale = fence([rec(b"a", 1, 10), rec(b"b", 1, 11), rec(b"a", 1, 30),
                         rec(b"a", 1, 20)], None)
    assert dict(kept) == {b"a": cardrecord.pack(1, 30, b"s"), b"b": cardrecord.pack(1, 11, b"s")}
    assert stale == 1


def test_a_record_behind_the_held_value_is_dropped_another_partitions_replaces_it() -> None:
    held = Held({b"a": cardrecord.pack(1, 50, b"h"), b"b": cardrecord.pack(2, 50, b"h")})
    kept, stale = fence([rec(b"a", 1, 40), rec(b"b", 1, 5), rec(b"c", 1, 1)], held)
    assert dict(kept) == {b"b": cardrecord.pack(1, 5, b"s"), b"c": cardrecord.pack(1, 1, b"s")}
    assert stale == 1
