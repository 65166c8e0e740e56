"""Chunks: a fetch's messages of one chunk topic, queued for the loop that takes them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from faust.types import TP, ConsumerMessage, Message

#: Fetched chunks waiting for a loop, per topic; a full queue stops fetching that topic.
CHUNK_QUEUE_SIZE = 4


@dataclass(frozen=True, slots=True)
class Chunk:
    """Messages of one fetch of a chunk topic, in offset order per partition."""

    generation: int
    messages: list[Message]


class ChunkQueue(asyncio.Queue):  # type: ignore[type-arg] - asyncio.Queue[Chunk]
    """Fetched chunks of one topic waiting for the loop that takes them; `room` is set while it
    can take another (the consumer does not fetch the topic while it is clear)."""

    def __init__(self, maxsize: int = CHUNK_QUEUE_SIZE) -> None:
        super().__init__(maxsize)
        self.room = asyncio.Event()
        self.room.set()

    def _put(self, item: Chunk) -> None:
        super()._put(item)
        if self.full():
            self.room.clear()

    def _get(self) -> Chunk:
        item: Chunk = super()._get()
        self.room.set()
        return item


def chunk_messages(tp: TP, records: Iterable[Any], generation: int) -> list[Message]:
    """A fetch's records of one partition as Faust messages: what Faust's `_to_message` makes
    of each (faust-streaming 0.15, pinned by check_faust_version), with the generation looked
    up once per fetch instead of once per record."""
    make = ConsumerMessage
    return [make(r.topic, r.partition, r.offset,
                 None if r.timestamp is None else r.timestamp / 1000.0, r.timestamp_type,
                 r.headers, r.key, r.value, r.checksum, r.serialized_key_size,
                 r.serialized_value_size, tp, generation_id=generation) for r in records]
