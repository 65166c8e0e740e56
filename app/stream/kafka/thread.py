"""The consumer thread: fetches only what Faust reads, and tells the offsets a fetch passed.

It owns the aiokafka consumer (corrections 4, 8 and 10 of app.stream.kafka.consumer): seeks run
on it, its fetches skip the partitions Faust does not read, an idle fetch parks at the broker
for `IDLE_FETCH_MAX_WAIT_MS` at most, and a fetch of a topic written in transactions, read
read_committed, reports the offsets it passed without handing them out (`Fetched.gaps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka.structs import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

#: The longest an idle worker's fetch waits at the broker for a first record (ms; Faust: 1,500).
#: A broker answers one connection's requests in order, so every other request to that broker
#: (the end offsets and metadata a rebalance's table recovery asks for) queued behind a parked
#: fetch: 0.3-1.4 s of a rolling restart's hand-over went there.
IDLE_FETCH_MAX_WAIT_MS = 100


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
        if self.consumer.plan.processing == "exactly_once":
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
