"""Strict commits (corrections 1 and 2): never past an unprocessed offset, acks kept until done.

In exactly_once, the offsets a fetch of a topic written in transactions passed without handing
them out (commit markers, aborted records) are acked as done (`_fill_gaps`), and the offsets of
the transactional topics, committed by the transactions that acked them, are only recorded.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.utils.functional import consecutive_numbers


class StrictCommits(faust_aiokafka.Consumer):
    """The commit corrections of `FraudConsumer` (its state is set up by FraudConsumer)."""

    transactional_topics: frozenset[str]
    gapped_topics: frozenset[str]
    _gaps: dict[TP, set[int]]

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
