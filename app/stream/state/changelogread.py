"""Reading one changelog partition straight off its record batches (the card restore's fast path).

aiokafka's consumer wraps every record in a ConsumerRecord through a generator: a third of a
restore's CPU, profiled. `RawReader` sends the same fetch requests with aiokafka's
client and hands the batches' own records over (they have `key`, `value` and `offset`, as a
ConsumerRecord does); anything unusual is left to the consumer (app.stream.state.restore).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.errors import for_code
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords


class Load(Protocol):
    """Where a partition's records go, in changelog order."""

    def apply(self, records: list[Any]) -> None:
        """Take the next records of the partition."""


class Unusual(Exception):
    """Something the raw reader leaves to aiokafka's consumer (errors, leader moves...)."""


class RawReader:
    """Fetch requests for one partition at a time, records read straight off the batches.

    Each batch's CRC is checked and control batches are skipped, as the consumer does; the next
    fetch is in flight while a response is applied. Anything unusual (an error code, no leader
    known, a response with no whole batch) raises `Unusual` with the offset reached, and the
    caller goes on from there with aiokafka's consumer, which handles all of it."""

    def __init__(self, client: AIOKafkaClient, fetch_bytes: int) -> None:
        self.client = client
        self.fetch_bytes = fetch_bytes

    async def read(self, tp: TopicPartition, begin: int, end: int, load: Load) -> int:
        """Apply `tp`'s records from `begin` to `end` (exclusive) to `load`; returns the offset
        reached (`end` when done; less when `Unusual` was raised, as its `args[1]`)."""
        offset = begin
        pending: asyncio.Task[bytes] | None = asyncio.ensure_future(self._fetch(tp, offset))
        try:
            while offset < end:
                assert pending is not None
                try:
                    data = await pending
                except Unusual as exc:
                    raise Unusual(str(exc), offset) from exc
                batches, reached = batches_from(data, offset)
                if reached <= offset:
                    raise Unusual("no whole record batch in the response", offset)
                pending = (asyncio.ensure_future(self._fetch(tp, reached))
                           if reached < end else None)
                records: list[Any] = []
                for batch in batches:
                    if batch.base_offset >= offset and batch.next_offset <= end:
                        records.extend(batch)
                    else:
                        records.extend(r for r in batch if offset <= r.offset < end)
                load.apply(records)
                offset = reached
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
        return offset

    async def _fetch(self, tp: TopicPartition, offset: int) -> bytes:
        node = self.client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            raise Unusual(f"no leader known for {tp}")
        request = FetchRequest(500, 1, self.fetch_bytes, 0,  # read_uncommitted, as the consumer
                               [(tp.topic, [(tp.partition, offset, self.fetch_bytes)])])
        try:
            response = await self.client.send(node, request)
        except Exception as exc:  # the consumer retries what the client raises
            raise Unusual(repr(exc)) from exc
        for _topic, partitions in response.topics:
            for partition, error_code, _highwater, *data in partitions:
                if partition == tp.partition:
                    if error_code:
                        raise Unusual(for_code(error_code).__name__)
                    return data[-1]  # type: ignore[no-any-return]
        raise Unusual(f"no data for {tp} in the fetch response")


def batches_from(data: bytes | None, offset: int) -> tuple[list[Any], int]:
    """The data batches of a fetch response from `offset`, CRC-checked, and the offset after
    them (control batches are skipped, their offsets passed)."""
    batches = []
    reached = offset
    if not data:
        return batches, reached
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        if getattr(batch, "is_control_batch", None) is None:
            raise Unusual("a record batch of the old message format")
        if not batch.validate_crc():
            raise Unusual("a record batch failed its CRC check")
        if batch.next_offset <= offset:
            continue
        reached = batch.next_offset
        if not batch.is_control_batch:
            batches.append(batch)
    return batches, reached
