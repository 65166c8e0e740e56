"""The card store's interface to the changelog restore, shared by its memory and RocksDB backends.

The backends are the memory store's adapter (app.stream.state.memory.MemoryTarget) and the
RocksDB database (app.stream.state.carddb.CardDB); the card_state table
(app.stream.state.cardstore.FencedTable) chooses one and is `Restorable` itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from faust.types import TP

if TYPE_CHECKING:
    from app.stream.state.restore import ChangelogRestorer


class RestoreTarget(Protocol):
    """A store the restore writes into (app.stream.state.carddb.CardDB, or the memory store's
    adapter, app.stream.state.memory.MemoryTarget)."""

    #: Every record of a partition it holds came with that partition's offset, so a partition
    #: held at -1 holds no record (the in-memory fence applies to it, the store is not read).
    offsets_cover_records: bool

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The values held for `keys` (None where absent)."""

    def write(self, records: Iterable[tuple[bytes, bytes]], offsets: Mapping[int, int], *,
              logged: bool = True) -> None:
        """Store records and the changelog offset each partition is now held up to, atomically;
        `logged=False` may leave them out of the write-ahead log until `flush`."""

    def flush(self) -> None:
        """Make every write so far durable."""

    def drop(self) -> None:
        """Forget everything held (found ahead of the changelog: not to be trusted)."""


class Restorable(Protocol):
    """A table that can restore itself ahead of Faust's recovery (app.stream.state.cardstore)."""

    restorer: ChangelogRestorer | None

    def restore_target(self) -> RestoreTarget:
        """Where restored records go."""

    def held_offset(self, tp: TP, tracked: int | None) -> int:
        """The last changelog offset of `tp` the store holds (-1: none); `tracked` is Faust's
        own account (what a store without persisted offsets holds)."""
