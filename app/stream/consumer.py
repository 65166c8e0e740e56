"""The Faust consumer of fraudstream: every correction to Faust's offset handling, in one subclass.

It is plugged in through Faust's own extension point: the `fraudstream://` broker scheme names
`Transport` below (the `faust.transports` entry point in pyproject.toml), whose `Consumer` is
`FraudConsumer`. Nothing of Faust is patched. What it corrects (seen here under worker kills and
rebalances; reported upstream as faust-streaming #312, #606, robinhood/faust #681):

1. Faust's head-of-queue check is off by one: with the message at the committed offset never
   acknowledged it commits past it. `_new_offset` never commits past an unacknowledged offset,
   and acknowledgements are dropped only once their commit is done (Faust drops them before it
   commits, so a commit that fails while the broker restarts loses them for good).
2. Faust counts a jump in fetched offsets as a "gap" of done messages (meant for compacted or
   transactional topics). Ours are neither: a jump means skipped messages. `_add_gap` records
   nothing, so they stall the commit instead of being committed unprocessed.
3. A fetched message whose hand-over is interrupted (a rebalance suspends the flow) is not
   recorded as read: its partition is rewound to it.
4. Seeks run on the consumer thread that owns the aiokafka consumer (upstream calls it from the
   app's loop, racing an in-flight fetch); after a seek nothing of that partition is handed
   over until the target offset itself arrives.
5. A partition the group never committed gets the log start as its committed offset when it
   is assigned: nothing is committed past messages dropped in the first rebalance. And the
   work done before a rebalance is committed when partitions are revoked: Faust drops the
   revoked partitions' acknowledgements before its own commit, so every rebalance (each
   worker that starts) re-read up to a commit interval of work on every partition.
6. The consumer thread fetches for a copy of the active partitions (a rebalance empties the
   live set mid-fetch, and aiokafka reads an empty set as "every partition"); records fetched
   for a partition paused meanwhile are handed back (rewound), not skipped.
7. At assignment the committed offsets of every partition are asked for in one request
   (aiokafka asks one partition at a time: a round trip each before the first fetch).
8. aiokafka fetches only the partitions Faust reads. Faust "pauses" a partition (a table's own
   changelog once restored, say) only in its own bookkeeping, so aiokafka went on fetching it,
   and nobody took what it fetched. aiokafka sends no fetch to a broker while a fetched, untaken
   result younger than its prefetch backoff (100 ms) waits: a worker's first card-state write,
   fetched back, held every input partition on that broker for 100 ms.
9. While Faust reads no partition at all (from an assignment until its tables are restored:
   it resumes the flow before the partitions) the fetch loop waits for the first partition it
   resumes, not Faust's fixed 1 s sleep; and one fetch call waits 100 ms at most for records,
   not 1 s (a call asks for the partitions Faust read when it began). Every rebalance held
   the first records of the partitions it assigned for up to a second.
10. A fetch of quiet partitions waits at the broker 100 ms at most, not Faust's 1.5 s: a broker
   answers one connection's requests in order, so the end offsets and metadata that a
   rebalance's table recovery asks for waited behind it (0.3-1.4 s of a rolling restart).

In exactly_once (the app's `fraudstream_processing`) it reads read_committed, leaves the input
topic's offsets to the score engine's Kafka transactions (app.stream.txnsink; a commit of its
own racing a transaction could move the group's offset back) and, on every assignment, lets
the transactional producers of the partitions gained fence their previous owner before anything
is read (`assign_hooks`).

It also hands whole fetched chunks of the chunk topics (transactions for the score engine,
actions for the dispatcher), tagged with the rebalance generation, to one queue per topic
(`chunk_queue`) instead of Faust's per-message delivery, which a rebalance could interrupt
without a trace; only table changelogs keep Faust's per-message path. A topic whose queue is full
is left out of the next fetches (its records wait in Kafka, not in the worker) so one slow loop
never holds the others back. `rewind` is the one place a partition is sent back to re-read; the
sequencers and the commit watchdog call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
from aiokafka.structs import TopicPartition
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, ConsumerMessage, Message
from faust.types.tuples import ack_lock
from faust.utils.functional import consecutive_numbers
from mode.utils.futures import notify

from app.stream import metrics
from app.stream.membership import remember_member

log = logging.getLogger(__name__)

#: faust-streaming versions this subclass was tested against (it overrides private methods).
TESTED_FAUST = ((0, 15, 3), (0, 16, 0))
#: A seek target not seen within this many seconds stops filtering (never drop silently for long).
SEEK_TARGET_TTL_S = 3.0
#: Fetched chunks waiting for a loop, per topic; a full queue stops fetching that topic.
CHUNK_QUEUE_SIZE = 4
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
#: The longest an idle worker's fetch waits at the broker for a first record (ms; Faust: 1,500).
#: A broker answers one connection's requests in order, so every other request to that broker
#: (the end offsets and metadata a rebalance's table recovery asks for) queued behind a parked
#: fetch: 0.3-1.4 s of a rolling restart's hand-over went there.
IDLE_FETCH_MAX_WAIT_MS = 100
#: The longest one fetch call waits for records (Faust's: 1 s). A call asks for the partitions
#: Faust read when it began, so one begun in a rebalance, before the new partitions are resumed,
#: held their first records back until it timed out (correction 9).
FETCH_POLL_S = 0.1
#: While a topic's queue is full, a fetch of the other topics waits at most this long (s).
BLOCKED_TOPIC_POLL_S = 0.005
#: How long a revoke waits for the engine's in-flight batches before it commits what is done.
SETTLE_ON_REVOKE_S = 10.0


def check_faust_version(version: str = faust.__version__) -> None:
    """Refuse a faust-streaming version the consumer corrections were not tested against."""
    try:
        parsed = tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        parsed = (0,)
    low, high = TESTED_FAUST
    if not low <= parsed < high:
        raise RuntimeError(
            f"faust-streaming {version} is not supported: fraudstream's consumer overrides "
            f"private Faust methods tested with >={'.'.join(map(str, low))},"
            f"<{'.'.join(map(str, high))}; install that range (pip install -e .)")


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


class FraudConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread; its aiokafka consumer reads read_committed in exactly_once, and
    fetches only the partitions Faust reads (correction 8)."""

    #: Faust's active partitions as of the last fetch call (set by the app's loop before it)
    wanted: frozenset[TP] | None = None
    #: Seeks of this consumer's partitions, numbered on this thread as each one moves a
    #: position, and each partition's last (number, target, aiokafka state): what a fetch that a
    #: seek overlapped read of that partition starts at the target (`_fetch_records`)
    seeks: int = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sought: dict[TP, tuple[int, int, Any]] = {}

    def seek(self, partition: TP, offset: int) -> None:
        super().seek(partition, offset)
        self.note_seek(self._ensure_consumer(), partition, offset)

    def note_seek(self, consumer: Any, tp: Any, offset: int) -> None:
        """Record a seek just made on this thread (before any other code of it runs)."""
        self.seeks += 1
        state = consumer._subscription.subscription.assignment.state_value(tp)  # noqa: SLF001
        self.sought[TP(tp.topic, tp.partition)] = (self.seeks, offset, state)

    async def _fetch_records(self, consumer: Any, active_partitions: Any,
                             timeout: float | None = None,  # noqa: ASYNC109
                             max_records: int | None = None) -> Any:
        if self.wanted is not None:
            fetch_only(consumer, self.wanted)
        gapped = self.consumer.gapped_topics
        if not gapped:
            return await super()._fetch_records(consumer, active_partitions, timeout=timeout,
                                                max_records=max_records)
        # read where each gapped partition stands before and after, on this thread, with
        # nothing in between but the fetch and the seeks noted meanwhile: the offsets it
        # passed and did not hand out
        seeks, before = self.seeks, position_states(consumer, gapped)
        records = await super()._fetch_records(consumer, active_partitions, timeout=timeout,
                                               max_records=max_records)
        sought = {tp: (offset, state) for tp, (n, offset, state) in self.sought.items()
                  if n > seeks}
        return Fetched(records, skipped_offsets(before, position_states(consumer, gapped),
                                                records, sought))

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = IDLE_FETCH_MAX_WAIT_MS  # noqa: SLF001  (the fetcher's at start)
        if getattr(self.app, "fraudstream_processing", "at_least_once") == "exactly_once":
            # Faust sets read_committed only under its own exactly-once mode, which would also
            # route every send through its transaction manager; the fetcher takes it at start
            consumer._isolation_level = "read_committed"  # noqa: SLF001
        return consumer


class Fetched(dict):  # type: ignore[type-arg] - dict[TP, list[ConsumerRecord]]
    """A fetch's records by partition, with the offsets its reading passed without handing
    them out (`gaps`: commit markers and aborted records of a topic read read_committed)."""

    def __init__(self, records: Mapping[TP, list[Any]], gaps: dict[TP, list[int]]) -> None:
        super().__init__(records)
        self.gaps = gaps


def position_states(consumer: Any, topics: frozenset[str]) -> dict[TP, tuple[Any, int]]:
    """aiokafka's state object and fetch position of each assigned partition of `topics` that
    has a position (none while it awaits a reset). Read on the consumer's own thread."""
    try:
        states = consumer._subscription.subscription.assignment._tp_state.items()  # noqa: SLF001
    except AttributeError:  # no assignment yet
        return {}
    return {TP(tp.topic, tp.partition): (state, state._position) for tp, state in states  # noqa: SLF001
            if tp.topic in topics and state._position is not None}  # noqa: SLF001


def skipped_offsets(before: Mapping[TP, tuple[Any, int]], after: Mapping[TP, tuple[Any, int]],
                    records: Mapping[TP, list[Any]],
                    sought: Mapping[TP, tuple[int, Any]]) -> dict[TP, list[int]]:
    """The offsets a fetch's reading passed without handing out a record: what its position
    went through, less its records. Positions move only by that reading or by a seek, and the
    reading hands out a fetched result only if it starts at the position of the moment: so a
    partition sought while the fetch waited (`sought`: its last target, and aiokafka's state
    then) was read from that target on, and one not sought from where it stood before.
    Otherwise (reassigned: a new state object; or moved back by a reset) the fetch vouches
    only for what lies between and after its own records (one pass over one result)."""
    skipped: dict[TP, list[int]] = {}
    for tp, (state, end) in after.items():
        offsets = [r.offset for r in records.get(tp, ())]
        prior, seek = before.get(tp), sought.get(tp)
        if seek is not None and seek[1] is state:
            start = seek[0]
        elif seek is None and prior is not None and prior[0] is state and prior[1] <= end:
            start = prior[1]
        elif offsets:
            start = offsets[0]
        else:
            continue
        have = set(offsets)
        gaps = [o for o in range(start, end) if o not in have]
        if gaps:
            skipped[tp] = gaps
    return skipped


def fetch_only(consumer: Any, wanted: frozenset[TP]) -> None:
    """Pause, in aiokafka, every assigned partition Faust does not read, and resume the ones it
    reads again; drop what was fetched for a paused partition (aiokafka's position stays at its
    first record: it is fetched again on resume). Run it on the consumer's own thread."""
    paused = consumer.paused()
    stop = [TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment()
            if tp not in wanted and tp not in paused]
    resume = [tp for tp in paused if tp in wanted]
    if stop:
        consumer.pause(*stop)
    if resume:
        consumer.resume(*resume)
    # what was fetched for a paused partition (a fetch in flight when it was paused stores its
    # result all the same) is dropped: nobody would take it
    buffered = consumer._fetcher._records  # noqa: SLF001
    for tp in [tp for tp in buffered if tp not in wanted and (tp in paused or tp in stop)]:
        del buffered[tp]


class FraudConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer with fraudstream's corrections (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_faust_version()
        super().__init__(*args, **kwargs)
        #: topics delivered as whole chunks, named by the app (`fraudstream_chunk_topics`)
        self.chunk_topics: frozenset[str] = frozenset(
            getattr(self.app, "fraudstream_chunk_topics", ()))
        self._chunk_queues: dict[str, ChunkQueue] = {}
        self.seek_targets: dict[TP, tuple[int, int, float]] = {}
        self.rewinds = 0
        #: awaited on revoke before the commit: lets the loops finish what they have in flight
        self.settlers: list[Callable[[], Awaitable[None]]] = []
        #: asked before each fetch: True while a loop has work (a batch being processed)
        self.busy_probes: list[Callable[[], bool]] = []
        self._fetch_idle: tuple[int, int] | None = None  # aiokafka's own (min bytes, max wait)
        self._readable = asyncio.Event()  # set when Faust resumes a partition (correction 9)
        #: exactly_once: topics whose offsets only the engine's transactions commit
        self.transactional_topics: frozenset[str] = frozenset(
            getattr(self.app, "fraudstream_transactional_topics", ()))
        #: awaited on every assignment before Faust's own handling (table recovery, the seek to
        #: the committed offsets), with the assignment and its generation
        self.assign_hooks: list[Callable[[set[TP], int], Awaitable[None]]] = list(
            getattr(self.app, "fraudstream_assign_hooks", ()))
        #: exactly_once: chunk topics written in transactions (actions); see `_fill_gaps`
        self.gapped_topics: frozenset[str] = (
            self.chunk_topics - self.transactional_topics
            if getattr(self.app, "fraudstream_processing", "") == "exactly_once" else frozenset())
        self._gaps: dict[TP, set[int]] = {}  # gapped partitions: offsets known never handed

    def _new_consumer_thread(self) -> FraudConsumerThread:
        return FraudConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def chunk_queue(self, topic: str) -> ChunkQueue:
        """The queue of fetched chunks of a chunk topic (created on first use)."""
        queue = self._chunk_queues.get(topic)
        if queue is None:
            queue = self._chunk_queues[topic] = ChunkQueue()
        return queue

    # --- one rewind ---------------------------------------------------------------------------
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

    def release(self, messages: Iterable[Message]) -> None:
        """Forget messages without acknowledging them: their offsets are not committed (they are
        read again), and a rebalance's wait for unacknowledged messages does not wait for them."""
        unacked = self._unacked_messages
        for message in messages:
            unacked.discard(message)

    # --- corrections 1 and 2: strict commits ---------------------------------------------------
    def _new_offset(self, tp: TP) -> int | None:
        """The offset to commit: past the consecutive run of acks from the committed offset.
        The acks stay until the commit is done (`_commit_offsets`): a commit that fails (the
        broker restarting) must not lose them, or the partition's commit would stall for good."""
        acked = self._acked[tp]
        if not acked:
            return None
        acked.sort()
        committed = self._committed_offset[tp]
        if committed is None:
            return None  # where the partition starts is not known yet
        if acked[0] > committed:
            return None  # the message at `committed` is not done yet: never commit past it
        return next(consecutive_numbers(acked))[-1] + 1

    async def _commit_offsets(self, offsets: Any, start_new_transaction: bool = True) -> bool:
        """Faust's commit; only once it has moved the committed offsets are the acks below them
        dropped (a commit that raised keeps them for the next one). Offsets of transactional
        topics were committed by the transaction that acked them: only recorded here."""
        try:
            if self.transactional_topics:
                done = {tp: o for tp, o in offsets.items() if tp.topic in self.transactional_topics}
                self._committed_offset.update(done)
                rest = {tp: o for tp, o in offsets.items() if tp not in done}
                committed = bool(rest) and bool(await super()._commit_offsets(
                    rest, start_new_transaction=start_new_transaction))
                return committed or bool(done)
            return bool(await super()._commit_offsets(
                offsets, start_new_transaction=start_new_transaction))
        finally:
            for tp in offsets:
                committed = self._committed_offset.get(tp)
                acked = self._acked.get(tp)
                if committed is None or not acked:
                    continue
                gaps = self._gaps.get(tp)
                if gaps:
                    gaps.difference_update([o for o in gaps if o < committed])
                done = [offset for offset in acked if offset < committed]
                if done:
                    acked[:] = [offset for offset in acked if offset >= committed]
                    self._acked_index[tp].difference_update(done)

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Never count unfetched offsets as done (Faust's gaps; `_fill_gaps` is ours)."""

    def _fill_gaps(self, records: Any) -> None:
        """A topic written in transactions, read read_committed, has offsets no consumer is
        handed: commit markers (one after every transaction) and aborted records. Those a fetch
        passed (`Fetched.gaps`, told on the consumer thread) are acked as done, or the
        partition's commit would stop at the first marker (and its lag never reach 0). What the
        fetch handed out is never among them, whatever becomes of it here (handed back for a
        paused partition, stale behind a seek, dropped in a rebalance): only a record that is
        processed is acked. A marker is one for good, so a fetch of an older generation counts
        too; below the committed offset nothing needs to."""
        for tp, offsets in (getattr(records, "gaps", None) or {}).items():
            if tp.topic not in self.gapped_topics:
                continue
            committed = self._committed_offset.get(tp)
            gaps = [o for o in offsets if committed is None or o >= committed]
            if gaps:
                self._gaps.setdefault(tp, set()).update(gaps)
                index = self._acked_index[tp]
                fresh = [o for o in gaps if o not in index]
                index.update(fresh)
                self._acked[tp].extend(fresh)

    def passed(self, tp: TP, offset: int) -> int:
        """The first offset at or after `offset` that is not a known gap (`_fill_gaps`): where
        a reader expecting `offset` actually finds its next record. Gaps below the committed
        offset are forgotten at the commit: the committed offset itself stands for them."""
        if tp.topic not in self.gapped_topics:
            return offset
        committed = self._committed_offset.get(tp)
        if committed is not None and offset < committed:
            offset = committed
        gaps = self._gaps.get(tp)
        while gaps and offset in gaps:
            offset += 1
        return offset

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

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        """Record this worker's group member id in its data directory first, so the next
        process there removes it from the group at once after a crash (app.stream.membership);
        then the `assign_hooks`, then Faust's own handling."""
        coordinator = getattr(getattr(getattr(self, "_thread", None), "_consumer", None),
                              "_coordinator", None)
        member = getattr(coordinator, "member_id", None)
        if member:
            try:
                remember_member(Path(self.app.conf.datadir), self.app.conf.id, member)
            except OSError as exc:  # only a later restart is slower for it: say so, go on
                log.warning("could not record the group member id: %r", exc)
        for hook in self.assign_hooks:  # exactly_once: fence the previous owners first
            await hook(assigned, generation_id)
        await super().on_partitions_assigned(assigned, generation_id)

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        """Commit what is done on the revoked partitions before Faust forgets their acks."""
        if not self.should_stop:
            self.stop_flow()  # what Faust does next anyway: no new chunk for the engine
            try:
                if self.settlers:
                    await asyncio.wait_for(asyncio.gather(*(settle() for settle in self.settlers)),
                                           SETTLE_ON_REVOKE_S)
                await self.commit()
            except Exception as exc:  # noqa: BLE001 - the new owner re-reads from the last commit
                log.info("no commit before the rebalance (%r): uncommitted work is read again",
                         exc)
                if isinstance(exc, TimeoutError):
                    # Faust's own revoke waits, without end, for every message read and not
                    # acked: a loop that did not settle held the group in its rebalance until
                    # the coordinator dropped this member (a minute). The new owners read the
                    # revoked partitions again from the last commit; what this worker keeps is
                    # acked whenever its loop gets to it.
                    stuck = list(self._unacked_messages)
                    self.release(stuck)
                    log.warning("the loops did not settle within %.0f s: %d messages released "
                                "(%s)", SETTLE_ON_REVOKE_S, len(stuck), _stacks_of_loops())
        await super().on_partitions_revoked(revoked)

    # --- fetch pacing: larger fetches only while a loop is busy -------------------------------
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

    # --- correction 3 and chunk delivery: the drain loop ---------------------------------------
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

    # --- diagnostics ---------------------------------------------------------------------------
    def fetch_positions(self) -> dict[TP, int]:
        """aiokafka's fetch position of each assigned partition: the offset after the last record
        its fetcher handed out, whatever became of that record (the commit watchdog's view of
        how far a partition was read). Read from the consumer thread's state without a lock:
        indicative only, empty when it cannot be read."""
        inner = getattr(getattr(self, "_thread", None), "_consumer", None)
        try:
            assignment = inner._subscription.subscription.assignment  # type: ignore[union-attr]
            states = list(assignment._tp_state.items())
        except (AttributeError, RuntimeError):  # not started, or reassigned meanwhile
            return {}
        return {TP(tp.topic, tp.partition): state._position for tp, state in states
                if state._position is not None}

    def state(self) -> dict[str, Any]:
        """Flow and per-partition bookkeeping, for diagnosing stalls (the /debug/consumer page).
        Read without locks: indicative only."""
        app = self.app
        partitions: dict[str, dict[str, Any]] = {}
        for tp in self.assignment():
            acked = self._acked.get(tp) or []
            target = self.seek_targets.get(tp)
            partitions[_name(tp)] = {
                "read": self._read_offset.get(tp),
                "committed": self._committed_offset.get(tp),
                "acked_min": min(acked) if acked else None,
                "acked": len(acked),
                "seek_target": None if target is None else target[0],
            }
        state: dict[str, Any] = {
            "generation": app.consumer_generation_id,
            "flow_active": self.flow_active,
            "can_resume_flow": self.can_resume_flow.is_set(),
            "suspend_flow": self.suspend_flow.is_set(),
            "in_recovery": bool(getattr(app, "in_recovery", False)),
            "active": _names(self._active_partitions),
            "paused": _names(self._paused_partitions),
            "buffered": _names(self._buffered_partitions),
            "unacked": len(self._unacked_messages),
            "chunks_queued": {t: q.qsize() for t, q in self._chunk_queues.items()},
            "rewinds": self.rewinds,
            "partitions": partitions,
        }
        inner = getattr(getattr(self, "_thread", None), "_consumer", None)
        if inner is not None:
            state["kafka"] = {
                "paused": _names(inner.paused()),
                "positions": {_name(tp): pos for tp, pos in self.fetch_positions().items()},
                "fetched": _names(getattr(inner._fetcher, "_records", {}).keys()),
            }
        return state


def _stacks_of_loops() -> str:
    """Where the score and dispatch loops and the checkpoint are waiting (for the log)."""
    out = []
    for task in asyncio.all_tasks():
        text = repr(task)
        if any(k in text for k in ("score", "dispatch", "Checkpoint")):
            frames = task.get_stack(limit=12)
            out.append(text[:120] + ": " + " <- ".join(
                f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames)))
    return "; ".join(out) or "no loop task found"


def _name(tp: Any) -> str:
    return f"{tp.topic}:{tp.partition}"


def _names(tps: Iterable[Any] | None) -> list[str]:
    return sorted(_name(tp) for tp in tps or ())


def chunk_messages(tp: TP, records: Iterable[Any], generation: int) -> list[Message]:
    """A fetch's records of one partition as Faust messages: what Faust's `_to_message` makes
    of each (faust-streaming 0.15, pinned by check_faust_version), with the generation looked
    up once per fetch instead of once per record."""
    make = ConsumerMessage
    return [make(r.topic, r.partition, r.offset,
                 None if r.timestamp is None else r.timestamp / 1000.0, r.timestamp_type,
                 r.headers, r.key, r.value, r.checksum, r.serialized_key_size,
                 r.serialized_value_size, tp, generation_id=generation) for r in records]


class Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with `FraudConsumer` (broker URL scheme `fraudstream://`)."""

    Consumer = FraudConsumer


def broker_url(bootstrap: str) -> str:
    """The Faust broker URL that selects this transport for `host:port[,host:port]`."""
    return "fraudstream://" + ";".join(h.strip() for h in bootstrap.split(",") if h.strip())
