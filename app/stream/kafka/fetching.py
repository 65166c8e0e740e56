"""Fetch pacing (corrections 6 and 9): what one fetch asks for, and how long it waits.

A fetch asks for a copy of the active partitions and hands back what it got for a partition
paused meanwhile; while no partition is read it waits for the first one resumed, not a second;
a topic whose chunk queue is full is left out; and while a loop is busy a fetch may wait at the
broker for more records.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from app.stream import metrics
from app.stream.kafka.chunks import ChunkQueue

#: The most records one fetch call hands over (aiokafka's max_poll_records; Faust sets no limit).
#: A chunk is one call's records: without a limit a worker behind its input took 1 MiB of every
#: partition per call, ~25k messages, and its queue held up to ~95k of them in memory.
MAX_POLL_RECORDS = 2048
#: While a loop is busy, a fetch may wait at the broker for this many bytes per partition...
BUSY_FETCH_MIN_BYTES_PER_PARTITION = 16 * 1024
#: ...but no longer than this (ms); an idle worker's fetch returns as soon as a record arrives.
#: Fed live at 12k / 16k ev/s (25k cards), 10 ms against 5: batches 153-161 / 215-220 events
#: against 85-90 / 177, CPU 55-58 / 50-52 µs per event against 60-65 / 56, steady p99 at 16k
#: 43-49 ms against 98 (15 ms: p50 up, and p99 over budget at 16k).
BUSY_FETCH_MAX_WAIT_MS = 10
#: The longest one fetch call waits for records (Faust's: 1 s). A call asks for the partitions
#: Faust read when it began, so one begun in a rebalance, before the new partitions are resumed,
#: held their first records back until it timed out (correction 9).
FETCH_POLL_S = 0.1
#: While a topic's queue is full, a fetch of the other topics waits at most this long (s).
BLOCKED_TOPIC_POLL_S = 0.005


class FetchPacing(faust_aiokafka.Consumer):
    """The fetch corrections of `FraudConsumer` (its state is set up by FraudConsumer)."""

    gapped_topics: frozenset[str]
    seek_targets: dict[TP, tuple[int, int, float]]
    busy_probes: list[Callable[[], bool]]
    _chunk_queues: dict[str, ChunkQueue]
    _fetch_idle: tuple[int, int] | None
    _readable: asyncio.Event

    def _busy(self) -> bool:
        return (any(not q.empty() for q in self._chunk_queues.values())
                or any(probe() for probe in self.busy_probes))

    def pace_fetch(self, busy: bool, partitions: int) -> None:
        """Let the next fetch wait at the broker for more records while a loop is busy (what
        arrives meanwhile would wait for it anyway, and a fetch round trip costs the same for
        one record as for hundreds), and return at the first record when every loop is idle."""
        fetcher = getattr(getattr(getattr(self, "_thread", None), "_consumer", None),
                          "_fetcher", None)
        if fetcher is None:
            return
        if self._fetch_idle is None:
            self._fetch_idle = (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms)
        if busy:
            fetcher._fetch_min_bytes = BUSY_FETCH_MIN_BYTES_PER_PARTITION * max(1, partitions)
            fetcher._fetch_max_wait_ms = BUSY_FETCH_MAX_WAIT_MS
        else:
            fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms = self._fetch_idle

    # --- correction 6: fetch for a copy; hand back records of paused partitions ----------------
    async def _getmany(self, active_partitions: Any, timeout: float) -> Any:  # noqa: ASYNC109
        if active_partitions is not None:
            self.pace_fetch(self._busy(), len(active_partitions))
            active_partitions = set(active_partitions)
            self._thread.wanted = frozenset(active_partitions)
            if not active_partitions:
                return {}
            full = [q for q in self._chunk_queues.values() if q.full()]
            if full:  # what a full queue's loop has not taken waits in Kafka
                names = {t for t, q in self._chunk_queues.items() if q.full()}
                active_partitions = {tp for tp in active_partitions if tp.topic not in names}
                if not active_partitions:
                    await asyncio.wait([asyncio.ensure_future(q.room.wait()) for q in full],
                                       timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                    return {}
                # the other topics are read meanwhile, but only briefly: a wait for them (the
                # group leader's topic gets no records at all) held the full topic's next fetch
                # for the whole timeout, though its loop made room a few ms later
                timeout = min(timeout, BLOCKED_TOPIC_POLL_S)
        return await self._thread.getmany(active_partitions, timeout)

    # --- correction 9: no nap while every partition is paused -----------------------------------
    def resume_partitions(self, tps: Iterable[TP]) -> None:
        super().resume_partitions(tps)
        self._readable.set()

    async def _until_readable(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until Faust reads some partition again (at most `timeout`): whether it does. Faust
        sleeps a whole second when it reads none (every partition is paused from an assignment
        until its tables are restored), so the first fetch after a rebalance came up to 1 s late
        (correction 9)."""
        if self.app.client_only or not self.flow_active or self._get_active_partitions():
            return True
        self._readable.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._readable.wait(), timeout)
        return bool(self._get_active_partitions())

    async def _wait_next_records(self, timeout: float) -> Any:  # noqa: ASYNC109
        if not self.flow_active:  # a rebalance: Faust resumes the flow before the partitions
            await self.wait(self.can_resume_flow)
        if not await self._until_readable(timeout):
            return {}, set()
        records, active = await super()._wait_next_records(timeout)
        if self.gapped_topics and records is not None:  # a fetch of markers only: empty
            self._fill_gaps(records)  # first: a seek target below may be a marker it passed
        if not records or active is None:
            return records, active
        for tp in [tp for tp in records if tp not in active and tp not in self._buffered_partitions
                   and not self._is_changelog_tp(tp)]:  # table recovery positions its own
            dropped = records.pop(tp)
            if not dropped:
                continue
            metrics.FETCH_HANDED_BACK.labels(tp.topic).inc(len(dropped))
            target = self.seek_targets.get(tp)
            if target is not None and self.passed(tp, target[0]) != dropped[0].offset:
                continue  # fetched before a pending seek: that seek reads them again already
            await self.rewind(tp, dropped[0].offset, "fetched while paused")
        return records, active
