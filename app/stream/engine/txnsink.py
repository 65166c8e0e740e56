"""exactly_once: one transactional producer per input partition, and the sink that fills them.

Fencing. A transactional id is `{app_id}-{input topic}-{partition}`, one per input partition, as
Faust's exactly-once mode names them: whoever is assigned a partition starts its producer
(`InitProducerId`) before it reads anything, which bumps the id's epoch (the previous owner's
producer is fenced: its next produce, offset commit or commit fails) and makes the broker end
that owner's open transaction first (abort), so the new owner's fetch of the committed offsets
sees a settled partition. One id per worker would need KIP-447 (the consumer group's generation
sent with the offsets, `TxnOffsetCommit` v3); aiokafka 0.14 sends v0 (`group_id` only), so
a worker that lost a partition without noticing could still commit output for it under its
own id. Per-partition ids fence it whatever the client sends.

Transactions. The outputs of input partition p go into p's open transaction as they are sent
(`send`). A durable point (app.stream.engine.checkpoint) `cut`s the open transactions off from later
outputs, then `commit`s each with its card changelog records (routed by `send_to`: a card's
changelog partition is its input partition, as Faust co-partitions tables) and its input
offsets (`send_offsets_to_transaction`). Outputs for p after a cut wait for that cut's commit
before p's next transaction begins: a transaction never holds outputs whose offsets it does not
commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka.structs import TopicPartition

from app.kafka.records import OutRecord
from app.kafka.sink import Entry, partition_for, send_grouped

log = logging.getLogger(__name__)


def transactional_id(app_id: str, topic: str, partition: int) -> str:
    """The transactional id of input partition `topic`[`partition`] (see the module)."""
    return f"{app_id}-{topic}-{partition}"


class _Txn:
    """One transaction of one input partition: begun after the previous one on it is done."""

    __slots__ = ("partition", "after", "done", "begun")

    def __init__(self, partition: int, after: _Txn | None) -> None:
        self.partition = partition
        self.after = after
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.begun = False


class Cut:
    """The transactions a durable point commits, by input partition."""

    __slots__ = ("txns",)

    def __init__(self, txns: dict[int, _Txn]) -> None:
        self.txns = txns


class TransactionalSink:
    """BatchSink's exactly_once twin: the producers of the owned input partitions and their
    transactions (see the module). `make_producer(transactional_id)` gives an unstarted
    transactional aiokafka producer; `source_topic` is the input topic's name, `group_id` the
    consumer group whose offsets the transactions commit."""

    def __init__(self, make_producer: Callable[[str], Any], topic_names: Mapping[str, str], *,
                 app_id: str, source_topic: str, group_id: str) -> None:
        self._make = make_producer
        self._names = dict(topic_names)
        self._app_id = app_id
        self._source = source_topic
        self._group = group_id
        self._producers: dict[int, Any] = {}
        self._partitions: dict[str, int] = {}
        self._open: dict[int, _Txn] = {}  # receiving outputs now
        self._last: dict[int, _Txn] = {}  # newest transaction of each partition
        self._committing: Cut | None = None
        self._after: list[Callable[[], None]] = []  # the durable point's, once it commits
        self._generation: int | None = None
        self.commits = 0

    # --- ownership ------------------------------------------------------------------------
    @property
    def owned(self) -> frozenset[int]:
        return frozenset(self._producers)

    async def assign(self, partitions: Iterable[int], generation: int) -> None:
        """Own exactly `partitions` from now on: stop the producers of partitions lost, start
        (and so fence the previous owner of) those gained. Call it before the new assignment
        reads its committed offsets or restores its table. A generation that skipped one (this
        worker missed a rebalance, so someone else may have owned its partitions meanwhile)
        starts every producer afresh."""
        wanted = set(partitions)
        skipped = self._generation is not None and generation > self._generation + 1
        self._generation = generation
        stop = [p for p in self._producers if p not in wanted or skipped]
        await asyncio.gather(*(self._stop(p) for p in stop))
        start = [p for p in sorted(wanted) if p not in self._producers]
        await asyncio.gather(*(self._start(p) for p in start))
        if stop or start:
            log.info("transactional producers: stopped %s, started %s", stop, start)

    async def _start(self, partition: int) -> None:
        producer = self._make(transactional_id(self._app_id, self._source, partition))
        await producer.start()
        try:
            # InitProducerId: fences the previous owner and ends its open transaction. aiokafka
            # has no public init_transactions; begin_transaction waits on the same future.
            await asyncio.shield(producer._txn_manager.wait_for_pid())  # noqa: SLF001
        except BaseException:
            await producer.stop()
            raise
        self._producers[partition] = producer
        for registry in (self._open, self._last):
            registry.pop(partition, None)

    async def _stop(self, partition: int) -> None:
        producer = self._producers.pop(partition)
        txn = self._open.pop(partition, None)
        self._last.pop(partition, None)
        try:
            if txn is not None and txn.begun and producer._txn_manager.is_in_transaction():  # noqa: SLF001
                # outputs never committed (their input is read again by the next owner): end
                # the transaction now rather than leave read_committed readers waiting on it
                await producer.abort_transaction()
        except Exception as exc:  # noqa: BLE001 - fenced already: the new owner aborted it
            log.info("partition %d: open transaction not aborted (%r)", partition, exc)
        finally:
            await producer.stop()
        if txn is not None and not txn.done.done():
            txn.done.set_exception(RuntimeError(f"partition {partition} was revoked"))
            txn.done.exception()  # retrieved: nobody may wait on it

    async def close(self) -> None:
        """Stop every producer (open transactions are aborted)."""
        await asyncio.gather(*(self._stop(p) for p in list(self._producers)),
                             return_exceptions=True)

    # --- transactions ---------------------------------------------------------------------
    def _new(self, partition: int) -> _Txn:
        txn = _Txn(partition, self._last.get(partition))
        self._last[partition] = txn
        return txn

    async def _begin(self, txn: _Txn) -> Any:
        producer = self._producers.get(txn.partition)
        if producer is None:
            raise RuntimeError(f"input partition {txn.partition} is not owned by this worker")
        if not txn.begun:
            if txn.after is not None:
                await asyncio.shield(txn.after.done)  # raises if that one failed
            await producer.begin_transaction()
            txn.begun = True
        return producer

    async def _partition_count(self, producer: Any, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            count = self._partitions[topic] = len(await producer.partitions_for(topic))
        return count

    async def send(self, records: Iterable[OutRecord]) -> list[asyncio.Future[Any]]:
        """Send each record in its input partition's open transaction (one begins where none
        is open, once the partition's previous one is committed)."""
        by_source: dict[int, list[OutRecord]] = {}
        for rec in records:
            if rec.source_partition is None:
                raise ValueError(f"a {rec.topic} record without its input partition cannot be "
                                 f"sent in a transaction")
            by_source.setdefault(rec.source_partition, []).append(rec)
        futures: list[asyncio.Future[Any]] = []
        for source, recs in by_source.items():
            txn = self._open.get(source)
            if txn is None:
                txn = self._open[source] = self._new(source)
            producer = await self._begin(txn)
            routed: dict[tuple[str, int], list[Entry]] = {}
            for rec in recs:
                topic = self._names[rec.topic]
                count = self._partitions.get(topic) or await self._partition_count(producer, topic)
                routed.setdefault((topic, partition_for(rec.key, rec.value, count)), []).append(
                    (rec.key, rec.value, rec.headers))
            futures.extend(future for future, _ in await send_grouped(producer, routed))
        return futures

    def cut(self, partitions: Iterable[int]) -> Cut:
        """Close the open transactions to later outputs, and give every partition in
        `partitions` without one a transaction of its own (its offsets still need committing):
        what the next durable point commits."""
        txns, self._open = self._open, {}
        for partition in partitions:
            if partition not in txns:
                txns[partition] = self._new(partition)
        return Cut(txns)

    async def send_to(self, grouped: Mapping[tuple[str, int], Sequence[Entry]]
                      ) -> list[asyncio.Future[Any]]:
        """Card changelog records, in the transaction being committed of the input partition
        that is their changelog partition (called from `commit`'s `write_cards`)."""
        return [future for future, _ in await self.send_counted(grouped)]

    async def send_counted(self, grouped: Mapping[tuple[str, int], Sequence[Entry]]
                           ) -> list[tuple[asyncio.Future[Any], int]]:
        """`send_to`, each delivery future with the number of records its batch carries."""
        cut = self._committing
        if cut is None:
            raise RuntimeError("changelog records outside a durable point")
        sent: list[tuple[asyncio.Future[Any], int]] = []
        for (topic, partition), entries in grouped.items():
            txn = cut.txns.get(partition)
            if txn is None:  # a card whose input partition sent nothing since the last cut
                txn = cut.txns[partition] = self._new(partition)
            producer = await self._begin(txn)
            sent.extend(await send_grouped(producer, {(topic, partition): entries}))
        return sent

    def after_commit(self, then: Callable[[], None]) -> None:
        """Run `then` once the durable point under way has committed (called from its
        `write_cards`: the card store takes the states the transactions committed); dropped
        if it fails."""
        if self._committing is None:
            raise RuntimeError("after_commit outside a durable point")
        self._after.append(then)

    async def commit(self, cut: Cut, offsets: Mapping[Any, int],
                     write_cards: Callable[[], Awaitable[list[asyncio.Future[Any]]]]) -> None:
        """One durable point: the card changelog (`write_cards`, through `send_to`) and the
        input offsets (`tp` → next offset to read) join the cut's transactions, which are then
        committed; a failure fails them all (the worker stops, its input is read again)."""
        after: list[Callable[[], None]] = []
        try:
            self._committing, self._after = cut, after
            try:
                await asyncio.gather(*await write_cards())
            finally:
                self._committing, self._after = None, []
            by_partition: dict[int, dict[TopicPartition, int]] = {}
            for tp, offset in offsets.items():
                by_partition.setdefault(tp.partition, {})[
                    TopicPartition(tp.topic, tp.partition)] = offset
            for partition in by_partition:
                if partition not in cut.txns:
                    cut.txns[partition] = self._new(partition)
            await asyncio.gather(*(self._commit_one(txn, by_partition.get(p))
                                   for p, txn in cut.txns.items()))
        except BaseException as exc:
            for txn in cut.txns.values():
                if not txn.done.done():
                    txn.done.set_exception(exc if isinstance(exc, Exception)
                                           else RuntimeError("durable point interrupted"))
                    txn.done.exception()
            raise
        self.commits += 1
        for then in after:
            then()

    async def _commit_one(self, txn: _Txn, offsets: dict[TopicPartition, int] | None) -> None:
        producer = await self._begin(txn)
        if offsets:
            await producer.send_offsets_to_transaction(offsets, self._group)
        await producer.commit_transaction()
        txn.done.set_result(None)
