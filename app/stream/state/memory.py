"""The memory backend of the card store: Faust's memory store as a restore target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class MemoryTarget:
    """The memory store as a restore target (no persisted offsets: restored whole each start)."""

    #: Faust's tracked offsets may say -1 for a partition whose cards the dict still holds (a
    #: partition assigned again in the same process): every fetch is fenced by a dict look-up.
    offsets_cover_records = False

    def __init__(self, store: Any) -> None:
        self.data = store.data  # the memory store's dict: raw keys and values here

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        get = self.data.get
        return [get(key) for key in keys]

    def write(self, records: Sequence[tuple[bytes, bytes]], offsets: Mapping[int, int], *,
              logged: bool = True) -> None:
        self.data.update(records)

    def flush(self) -> None:
        pass  # nothing outlives the process

    def drop(self) -> None:
        self.data.clear()
