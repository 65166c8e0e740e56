"""Hand-over (correction 3): the drain loop, whole chunks to their queues, stale records skipped.

A fetched message whose hand-over is interrupted (a rebalance suspends the flow) is not recorded
as read: its partition is rewound to it. Chunk topics' records go to their loop's queue as whole
chunks, tagged with the rebalance generation; only table changelogs keep Faust's per-message path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from app.stream.kafka.chunks import Chunk, ChunkQueue, chunk_messages
from app.stream.kafka.fetching import FETCH_POLL_S

log = logging.getLogger(__name__)

#: A seek target not seen within this many seconds stops filtering (never drop silently for long).
SEEK_TARGET_TTL_S = 3.0


class ChunkHandOver(faust_aiokafka.Consumer):
    """The hand-over corrections of `FraudConsumer` (its state is set up by FraudConsumer)."""

    chunk_topics: frozenset[str]
    seek_targets: dict[TP, tuple[int, int, float]]
    _chunk_queues: dict[str, ChunkQueue]

    def release(self, messages: Iterable[Message]) -> None:
        """Forget messages without acknowledging them: their offsets are not committed (they are
        read again), and a rebalance's wait for unacknowledged messages does not wait for them."""
        unacked = self._unacked_messages
        for message in messages:
            unacked.discard(message)

    def stop_flow(self) -> None:
        """Stop the flow (a rebalance) and drop the chunks no loop has taken yet."""
        super().stop_flow()
        for queue in self._chunk_queues.values():
            while not queue.empty():
                self.release(queue.get_nowait().messages)

    def _stale(self, tp: TP, offset: int) -> bool:
        """Whether a fetched message is to be skipped: behind a pending seek, or read already."""
        target = self.seek_targets.get(tp)
        if target is not None:
            if (target[1] != self.app.consumer_generation_id
                    or time.monotonic() - target[2] > SEEK_TARGET_TTL_S):
                # a rebalance sought everything to the commits since, or the target never
                # came: hand over again (the sequencer catches any gap)
                del self.seek_targets[tp]
            elif offset != self.passed(tp, target[0]):
                return True  # fetched before the seek: stale, it is read again from there
            else:
                del self.seek_targets[tp]
        read = self._read_offset[tp]
        return read is not None and offset < read

    def _may_be_stale(self, tp: TP, first: int) -> bool:
        """Whether any of a partition's fetched records, offsets from `first` up, can be
        `_stale`: only behind a pending seek, or below what was read already."""
        if tp in self.seek_targets:
            return True
        read = self._read_offset[tp]
        return read is not None and first < read

    async def _hand_over(self, delivery: Any, what: str, parts: dict[TP, int]) -> bool:
        """Await a hand-over unless the flow is suspended first; rewind what was not handed over."""
        result = await self.wait_first(delivery, self.suspend_flow.wait())
        if delivery in result.done:
            return True
        for tp, offset in parts.items():
            log.info("%s: hand-over of %s at offset %d interrupted", tp, what, offset)
            await self.rewind(tp, offset, "hand-over interrupted")
        return False

    async def _deliver_chunk(self, generation: int, by_tp: dict[TP, list[Message]]) -> None:
        """Queue a fetch's messages of one chunk topic (all of `by_tp`) for its loop."""
        messages = [m for msgs in by_tp.values() for m in msgs]
        # Pending until acked or released (what a rebalance's `wait_empty` waits for). Faust's
        # sensors are not told: the loops' Prometheus metrics count these messages.
        unacked = self._unacked_messages
        for message in messages:
            unacked.add(message)
        queue = self.chunk_queue(messages[0].topic)
        chunk = Chunk(generation, messages)
        if not queue.full():  # always, but for a fetch that raced a full queue
            queue.put_nowait(chunk)
        elif not await self._hand_over(queue.put(chunk), "a chunk",
                                       {tp: msgs[0].offset for tp, msgs in by_tp.items()}):
            self.release(messages)
            return
        for tp, msgs in by_tp.items():
            self._read_offset[tp] = msgs[-1].offset

    def ack_many(self, messages: Iterable[Message]) -> int:
        """`ack` for a whole batch: one lock, one acks-enabled lookup per topic; how many took."""
        enabled: dict[str, bool] = {}
        acks_enabled_for = self.app.topics.acks_enabled_for
        committed_of, index_of, acked_of = self._committed_offset, self._acked_index, self._acked
        unacked = self._unacked_messages
        n = 0
        with ack_lock:
            try:
                for message in messages:
                    if message.acked:
                        continue
                    message.acked = True
                    topic = message.topic
                    on = enabled.get(topic)
                    if on is None:
                        on = enabled[topic] = acks_enabled_for(topic)
                    if not on:
                        continue
                    tp, offset = message.tp, message.offset
                    committed = committed_of[tp]
                    if committed is not None and offset < committed:
                        continue
                    index = index_of[tp]
                    if offset in index:
                        continue
                    unacked.discard(message)
                    index.add(offset)
                    acked_of[tp].append(offset)
                    n += 1
            finally:
                self._n_acked += n
                notify(self._waiting_for_ack)
        return n

    def _split(self, records: Any, active: set[TP] | None
               ) -> tuple[dict[TP, list[Any]], dict[TP, list[Any]]]:
        """A fetch's records of active partitions: (chunk topics, other topics), by partition."""
        chunked: dict[TP, list[Any]] = {}
        single: dict[TP, list[Any]] = {}
        buffered = self._buffered_partitions
        track_end = self.app.monitor.track_tp_end_offset
        for tp, recs in records.items():
            if not recs or (active is not None and tp not in active and tp not in buffered):
                continue
            track_end(tp, self.highwater(tp))
            (chunked if tp.topic in self.chunk_topics else single)[tp] = recs
        return chunked, single

    async def _fetch(self, timeout: float) -> tuple[int, dict[TP, list[Any]], dict[TP, list[Any]]]:  # noqa: ASYNC109
        """One fetch, checked as Faust's `getmany` checks it, split by `_split`."""
        records, active = await self._wait_next_records(timeout)
        generation = self.app.consumer_generation_id
        if records is None or self.should_stop:
            return generation, {}, {}
        if not self.flow_active:
            try:  # what Faust's getmany does when the flow is stopped
                await self.perform_seek()
            except Exception as exc:  # noqa: BLE001 - as upstream: the next fetch tries again
                log.warning("seek to the commits while the flow is stopped failed: %r", exc)
            return generation, {}, {}
        return (generation, *self._split(records, active))

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - end to end
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        stale = self._stale
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                generation, chunked, single = await self._fetch(timeout=FETCH_POLL_S)
                await self.sleep(0)
                if self.should_stop:
                    continue
                if single:
                    await self._deliver_each(generation, single)
                if chunked and self.flow_active and self.app.consumer_generation_id == generation:
                    # stale is checked here, after the hand-overs above: a rewind meanwhile
                    # makes the rest of its partition's fetch stale
                    by_topic: dict[str, dict[TP, list[Message]]] = {}
                    for tp, recs in chunked.items():
                        if self._may_be_stale(tp, recs[0].offset):
                            recs = [r for r in recs if not stale(tp, r.offset)]
                        msgs = chunk_messages(tp, recs, generation)
                        if msgs:
                            by_topic.setdefault(tp.topic, {})[tp] = msgs
                    for chunk in by_topic.values():
                        await self._deliver_chunk(generation, chunk)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _deliver_each(self, generation: int, records: dict[TP, list[Any]]) -> None:
        """Faust's per-message delivery (round-robin over topics) for topics not chunked."""
        callback = self.callback
        stale = self._stale
        to_message = self._to_message
        interrupted: set[TP] = set()
        for n, (tp, record) in enumerate(self.scheduler.iterate(records)):
            if not self.flow_active or self.app.consumer_generation_id != generation:
                break
            if n and n % 1000 == 0:
                await asyncio.sleep(0)
            if tp in interrupted or stale(tp, record.offset):
                continue
            if self._commit_every is not None and self._n_acked >= self._commit_every:
                self._n_acked = 0
                await self.commit()
            message = to_message(tp, record)  # the conductor's callback tracks it
            if await self._hand_over(callback(message), "a message", {tp: message.offset}):
                self._read_offset[tp] = message.offset
            else:
                interrupted.add(tp)  # everything after it is fetched again
