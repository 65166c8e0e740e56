"""Seeks (corrections 4, 5 and 7): one rewind, seeks on the consumer thread, known starts.

`rewind` is the one place a partition is sent back to re-read (the sequencers and the commit
watchdog call it); every seek records its target, and nothing of the partition is handed over
until the target itself arrives (app.stream.kafka.handover). At assignment the committed offsets
of every partition are asked for in one request, and a partition the group never committed gets
the log start as its committed offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from app.stream import metrics

log = logging.getLogger(__name__)


class Seeks(faust_aiokafka.Consumer):
    """The seek corrections of `FraudConsumer` (its state is set up by FraudConsumer)."""

    chunk_topics: frozenset[str]
    seek_targets: dict[TP, tuple[int, int, float]]
    rewinds: int

    async def rewind(self, tp: TP, offset: int, reason: str) -> bool:
        """Read `tp` again from `offset`: the one way any part of the worker sends a partition
        back. False when the partition is no longer assigned (its next owner reads it) or a
        rebalance came first (the new generation starts from the commits anyway)."""
        if tp not in self.assignment():
            return False
        generation = self.app.consumer_generation_id
        # from here on nothing of this partition is handed over until the target itself
        # arrives (records fetched before the seek are stale)
        self.seek_targets[tp] = (offset, generation, time.monotonic())

        def seek_on_thread() -> bool:
            # A rewind asked during a rebalance waits here until the rebalance is over: run
            # then, it would land after the new generation's seek to the commits and skip
            # every message between the commit and `offset`. Only the asking generation seeks.
            if self.app.consumer_generation_id != generation:
                return False
            self._thread.seek(tp, offset)
            return True

        try:
            sought = await self._thread.call_thread(seek_on_thread)
        except Exception as exc:  # noqa: BLE001 - revoked meanwhile: its next owner reads it
            log.info("%s: not rewound (%r); its next owner starts at the commit", tp, exc)
            return False
        if not sought or self.app.consumer_generation_id != generation:
            log.info("%s: rewind to %d dropped: a rebalance came first", tp, offset)
            return False
        self._read_offset[tp] = offset
        metrics.REWINDS.labels(tp.topic, reason).inc()
        self.rewinds += 1
        log.info("%s: reading again from offset %d (%s)", tp, offset, reason)
        return True

    # --- correction 4: seeks on the consumer thread --------------------------------------------
    async def _seek(self, partition: TP, offset: int) -> None:
        # set before the seek: from here on nothing of this partition is handed over until the
        # target itself arrives (records fetched before the seek are stale)
        self.seek_targets[partition] = (offset, self.app.consumer_generation_id, time.monotonic())
        await self._thread.call_thread(self._thread.seek, partition, offset)

    # --- correction 7: one request for the committed offsets at assignment ----------------------
    async def seek_to_committed(self) -> Mapping[TP, int | None]:
        """Seek every assigned partition to its committed offset, asking the group coordinator
        once for all of them: aiokafka asks one partition at a time, so a worker that has just
        joined made a round trip per partition (16 here) before its first fetch."""
        return await self._thread.call_thread(self._seek_to_committed_at_once)

    async def _seek_to_committed_at_once(self) -> dict[TP, int | None]:
        kafka = self._thread._ensure_consumer()
        partitions = list(kafka.assignment())
        if not partitions:
            return {}
        found = await kafka._coordinator.fetch_committed_offsets(partitions)
        committed: dict[TP, int | None] = {}
        for tp in partitions:
            meta = found.get(tp)
            offset = None if meta is None or meta.offset < 0 else meta.offset
            committed[tp] = offset
            if offset:  # as aiokafka: offset 0 or none leaves the reset policy to place it
                kafka._fetcher.seek_to(tp, offset)
                self._thread.note_seek(kafka, tp, offset)
        # what Faust's perform_seek records once this returns, recorded with the seek: the
        # fetch loop may take the first records from these positions before it gets to run
        # (a chunk whose partition had no committed offset yet was read again from the log start)
        self._read_offset.update({TP(tp.topic, tp.partition): offset
                                  for tp, offset in committed.items()})
        self._committed_offset.update({TP(tp.topic, tp.partition): offset
                                       for tp, offset in committed.items() if offset})
        return committed

    # --- correction 5: the log start of never-committed partitions -----------------------------
    async def perform_seek(self) -> None:
        await super().perform_seek()
        try:
            await self.fill_unknown_commits(self.chunk_topics)
        except Exception as exc:  # noqa: BLE001 - the commit watchdog fills them in later
            log.info("log start of uncommitted partitions not known yet (%r)", exc)

    async def fill_unknown_commits(self, topics: frozenset[str]) -> int:
        """Take the log start as the committed offset of assigned partitions that have none."""
        unknown = [tp for tp in self.assignment()
                   if tp.topic in topics and self._committed_offset.get(tp) is None]
        if not unknown:
            return 0
        earliest = await self.earliest_offsets(*unknown)
        filled = 0
        for tp in unknown:
            start = earliest.get(tp)
            if start is not None and self._committed_offset.get(tp) is None:
                self._committed_offset[tp] = start
                filled += 1
        return filled
