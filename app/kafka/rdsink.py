"""The worker's at_least_once sink on librdkafka (confluent-kafka): BatchSink's interface, with
the produce protocol (batching, requests, responses, retries) in librdkafka's own threads.

Fed live, aiokafka's producer costs the worker's event loop ~13 µs of CPU an event, under the
GIL: its accumulator, sender task and the encoding and decoding of every produce request run in
Python on the loop that scores (a raw consume → produce loop at 15k / 25k ev/s: 33.6 / 27.2 µs an
event with aiokafka's producer, 20.4 / 13.7 with this one; docs/performance.md). Here a record
costs one `produce` call; a thread waits in `poll` for the delivery reports and settles a whole
(topic, partition) group's future at once.

Delivery means what it means for aiokafka with acks=all: every record of the group is in the
in-sync replicas' logs. The producer is idempotent, so a retried request neither reorders nor
doubles a partition's records (a card's later snapshot never lands before an earlier one).
A group's future fails if any record of it is not delivered within `message.timeout.ms`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.kafka.records import OutRecord
from app.kafka.sink import BatchSink, Entry, partition_for

#: How long the delivery thread waits in one `poll` (s): only how soon it sees `close`.
POLL_S = 0.1
#: While librdkafka's queue is full, how long `send` waits for deliveries to free it (s).
QUEUE_FULL_WAIT_S = 0.002


class DeliveryFailed(RuntimeError):
    """A record of a group was not delivered (librdkafka's error, after its own retries)."""


@dataclass(frozen=True, slots=True)
class Delivered:
    """What a group's future gives: like aiokafka's RecordMetadata for a record batch,
    `offset + count - 1` is the offset of the group's last record."""

    topic: str
    partition: int
    offset: int


class _Group:
    """One (topic, partition)'s records of one `send`: counts its delivery reports (called on
    the delivery thread) and settles its future on the loop once all are in."""

    __slots__ = ("count", "error", "future", "last", "left", "partition", "sink", "topic")

    def __init__(self, future: asyncio.Future[Any], topic: str, partition: int, count: int,
                 sink: RdSink) -> None:
        self.future = future
        self.topic = topic
        self.partition = partition
        self.count = count
        self.left = 1  # only the last record reports (in order, gapless: it vouches for all)
        self.last = -1
        self.error: Any = None
        self.sink = sink

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            if self.error is None:
                self.error = err
        else:
            offset = msg.offset()
            if offset > self.last:
                self.last = offset
        self.left -= 1
        if self.left == 0:  # on the thread in `poll` (or `flush`): it alone touches `_done`
            self.sink._done.append(self)  # noqa: SLF001

    def settle(self) -> None:
        if self.future.done():
            return
        if self.error is not None:
            self.future.set_exception(DeliveryFailed(
                f"{self.topic}[{self.partition}]: {self.error}"))
        else:
            self.future.set_result(Delivered(self.topic, self.partition,
                                             self.last - self.count + 1))


def _settle(groups: list[_Group]) -> None:
    for group in groups:
        group.settle()


class RdSink(BatchSink):
    """BatchSink through a confluent-kafka producer made by `make` (on first use).

    `producer` (Faust's aiokafka producer) still answers partition counts and leaders for
    `warm`; records go through librdkafka only."""

    def __init__(self, producer: Callable[[], Any], topic_names: Mapping[str, str],
                 make: Callable[[], Any]) -> None:
        super().__init__(producer, topic_names)
        self._make = make
        self._rd: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: list[_Group] = []  # groups complete since the last hand-over

    def _started(self) -> Any:
        if self._rd is None:
            self._loop = asyncio.get_running_loop()
            self._rd = self._make()
            self._thread = threading.Thread(target=self._deliveries, name="rdsink-deliveries",
                                            daemon=True)
            self._thread.start()
        return self._rd

    def _deliveries(self) -> None:
        """The delivery thread: librdkafka calls each record's report in `poll`, here; the
        groups they complete are settled on the loop, one hand-over per `poll`."""
        rd, loop = self._rd, self._loop
        assert loop is not None
        while not self._stop.is_set():
            rd.poll(POLL_S)
            done = self._done
            if done:
                self._done = []
                try:
                    loop.call_soon_threadsafe(_settle, done)
                except RuntimeError:  # the loop is closed: nobody waits for these any more
                    return

    async def warm(self, extra: Iterable[str] = (), *, timeout_s: float = 10.0) -> list[str]:
        leaderless = await super().warm(extra, timeout_s=timeout_s)
        rd = self._started()
        loop = asyncio.get_running_loop()
        for topic in [*self._names.values(), *extra]:  # metadata before the first record
            await loop.run_in_executor(None, lambda t=topic: rd.list_topics(t, timeout=timeout_s))
        return leaderless

    async def send(self, records: Iterable[OutRecord]) -> list[asyncio.Future[Any]]:
        grouped: dict[tuple[str, int], list[Entry]] = {}
        names, partitions = self._names, self._partitions

        for rec in records:
            topic = names[rec.topic]
            count = partitions.get(topic) or await self._partition_count(self._producer(), topic)
            grouped.setdefault((topic, partition_for(rec.key, rec.value, count)), []).append(
                (rec.key, rec.value, rec.headers))
        return await self.send_to(grouped)

    async def send_to(self, grouped: Mapping[tuple[str, int], Sequence[Entry]]
                      ) -> list[asyncio.Future[Any]]:
        return [future for future, _ in await self.send_counted(grouped)]

    async def send_counted(self, grouped: Mapping[tuple[str, int], Sequence[Entry]]
                           ) -> list[tuple[asyncio.Future[Any], int]]:
        rd = self._started()
        produce = rd.produce
        loop = self._loop
        assert loop is not None
        sent: list[tuple[asyncio.Future[Any], int]] = []
        for (topic, partition), entries in grouped.items():
            if not entries:
                continue
            future = loop.create_future()
            group = _Group(future, topic, partition, len(entries), self)
            last = len(entries) - 1
            for i, (key, value, headers) in enumerate(entries):
                while True:
                    try:
                        produce(topic, value, key, partition=partition,
                                on_delivery=group if i == last else None,
                                headers=list(headers) if headers else None)
                        break
                    except BufferError:  # librdkafka's queue is full: let deliveries drain it
                        await asyncio.sleep(QUEUE_FULL_WAIT_S)
            sent.append((future, len(entries)))
        return sent

    async def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (up to `timeout_s`), then stop the delivery thread."""
        if self._rd is None:
            return
        loop = asyncio.get_running_loop()
        self._stop.set()
        if self._thread is not None:
            await loop.run_in_executor(None, self._thread.join, 2 * POLL_S)
        await loop.run_in_executor(None, self._rd.flush, timeout_s)  # reports: into `_done`
        _settle(self._done)
        self._done = []
