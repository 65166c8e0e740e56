"""The card_state table's value: where in the source log a card's state stands, and the state.

Every value is `<partition:int32><offset:int64>` followed by `CardState.to_bytes()`: the
source partition and offset of the last message of the card folded into the state. That
position is the fence that keeps re-reads exact: a message at or before it has been applied
already (its outputs were flushed before the state was written), whatever the state's
windows still remember of it; and a changelog record older than the value a worker already
holds is never restored over it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, Protocol

_POSITION: Final = struct.Struct("<iq")

#: No message folded in yet (a card never seen).
NOWHERE: Final = (-1, -1)


@dataclass(frozen=True, slots=True)
class CardRecord:
    """A decoded card_state value: the source position it covers and the state's bytes."""

    partition: int
    offset: int
    state: memoryview


def pack(partition: int, offset: int, state: bytes) -> bytes:
    """A card_state value for `state` after the message at (partition, offset)."""
    return _POSITION.pack(partition, offset) + state


class _Serializable(Protocol):
    def to_bytes(self, prefix: bytes = ..., /) -> bytes: ...


def record(partition: int, offset: int, state: _Serializable) -> bytes:
    """`pack(partition, offset, state.to_bytes())`, the state written straight after its
    position (one allocation and one copy: the snapshot serializes every changed card)."""
    return state.to_bytes(_POSITION.pack(partition, offset))


def unpack(raw: bytes) -> CardRecord:
    """Decode a card_state value; ValueError when it is too short to hold a position."""
    if len(raw) < _POSITION.size:
        raise ValueError(f"card_state value: {len(raw)} bytes is too short")
    partition, offset = _POSITION.unpack_from(raw)
    return CardRecord(partition, offset, memoryview(raw)[_POSITION.size:])


def newer(candidate: bytes, current: bytes | None) -> bool:
    """Whether a changelog value may replace `current`: never one behind it in the same partition."""
    if current is None:
        return True
    old, new = unpack(current), unpack(candidate)
    return new.partition != old.partition or new.offset >= old.offset
