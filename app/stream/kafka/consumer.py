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

In exactly_once (the app's `ConsumerPlan.processing`) it reads read_committed, leaves the input
topic's offsets to the score engine's Kafka transactions (app.stream.engine.txnsink; a commit of
its own racing a transaction could move the group's offset back) and, on every assignment, lets
the transactional producers of the partitions gained fence their previous owner before anything
is read (`ConsumerPlan.assign_hooks`).

It also hands whole fetched chunks of the chunk topics (transactions for the score engine,
actions for the dispatcher), tagged with the rebalance generation, to one queue per topic
(`chunk_queue`) instead of Faust's per-message delivery, which a rebalance could interrupt
without a trace; only table changelogs keep Faust's per-message path. A topic whose queue is full
is left out of the next fetches (its records wait in Kafka, not in the worker) so one slow loop
never holds the others back. `rewind` is the one place a partition is sent back to re-read; the
sequencers and the commit watchdog call it.

The corrections live by job beside this module, one base class of `FraudConsumer` each:
`commits` (1, 2), `handover` (3 and the chunks), `seeks` (4, 5, 7 and `rewind`), `fetching`
(6, 9 and the fetch pacing), and `thread` (the consumer thread: 4, 8, 10).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from app.stream.kafka.chunks import ChunkQueue
from app.stream.kafka.commits import StrictCommits
from app.stream.kafka.fetching import FetchPacing
from app.stream.kafka.handover import ChunkHandOver
from app.stream.kafka.membership import remember_member
from app.stream.kafka.plan import ConsumerPlan
from app.stream.kafka.seeks import Seeks
from app.stream.kafka.thread import FraudConsumerThread

log = logging.getLogger(__name__)

#: faust-streaming versions this subclass was tested against (it overrides private methods).
TESTED_FAUST = ((0, 15, 3), (0, 16, 0))
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


class FraudConsumer(ChunkHandOver, FetchPacing, Seeks, StrictCommits):
    """Faust's aiokafka consumer with fraudstream's corrections (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_faust_version()
        super().__init__(*args, **kwargs)
        #: what the app tells its consumer (set on the app by create_app before it exists)
        self.plan: ConsumerPlan = self.app.consumer_plan
        #: topics delivered as whole chunks
        self.chunk_topics: frozenset[str] = self.plan.chunk_topics
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
        self.transactional_topics: frozenset[str] = self.plan.transactional_topics
        #: exactly_once: chunk topics written in transactions (actions); see `_fill_gaps`
        self.gapped_topics: frozenset[str] = self.plan.gapped_topics
        self._gaps: dict[TP, set[int]] = {}  # gapped partitions: offsets known never handed

    def _new_consumer_thread(self) -> FraudConsumerThread:
        return FraudConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def chunk_queue(self, topic: str) -> ChunkQueue:
        """The queue of fetched chunks of a chunk topic (created on first use)."""
        queue = self._chunk_queues.get(topic)
        if queue is None:
            queue = self._chunk_queues[topic] = ChunkQueue()
        return queue

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        """Record this worker's group member id in its data directory first, so the next
        process there removes it from the group at once after a crash
        (app.stream.kafka.membership); then the plan's `assign_hooks`, then Faust's own
        handling."""
        coordinator = getattr(getattr(getattr(self, "_thread", None), "_consumer", None),
                              "_coordinator", None)
        member = getattr(coordinator, "member_id", None)
        if member:
            try:
                remember_member(Path(self.app.conf.datadir), self.app.conf.id, member)
            except OSError as exc:  # only a later restart is slower for it: say so, go on
                log.warning("could not record the group member id: %r", exc)
        for hook in self.plan.assign_hooks:  # exactly_once: fence the previous owners first
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


class Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with `FraudConsumer` (broker URL scheme `fraudstream://`)."""

    Consumer = FraudConsumer


def broker_url(bootstrap: str) -> str:
    """The Faust broker URL that selects this transport for `host:port[,host:port]`."""
    return "fraudstream://" + ";".join(h.strip() for h in bootstrap.split(",") if h.strip())
