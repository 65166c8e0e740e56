"""Table recovery of the card table: its store checked against the changelog, then read ahead.

`CardRecovery` is Faust's table recovery with two steps of its own. Before Faust compares the
offsets a store holds with the changelog's (it raises ConsistencyError on one past the end), it
checks what the store mirrors (app.stream.state.lineage): a store of another app id or of a
changelog deleted and created again is discarded, a partition held past its changelog's end too,
and restored from the changelog like one held from nothing. Just before Faust seeks its
changelog consumer, the card table's restorer reads each assigned changelog partition ahead of
it (app.stream.state.restore).

In exactly_once `MarkerAwareRecovery` knows a transactional changelog ends in a commit marker.
Faust takes a changelog partition as caught up when it has applied the record at its end
offset minus one. In exactly_once every durable point ends the card changelog's transaction
with a commit marker, a control record no consumer is ever handed, so that offset never
arrives. Active partitions are read to their end offset by the card restorer
(app.stream.state.restore), which reports the offset before the end as held, marker or record, so
Faust has nothing left to read for them. Standby partitions are followed by Faust's consumer:
one whose fetch position has passed its highwater counts as caught up (only markers were left),
or Faust's `standby_remaining_total()` would never reach 0 and it would never declare its
standbys ready (`on_standbys_ready`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.types import TP

from app.stream.state.lineage import Changelog, LineageStore, reconcile


def standby_lag(recovery: Any) -> int:
    """Changelog records the standby partitions are behind. Faust's
    `standby_remaining_total()` leaves out a partition it has read nothing of yet (offset -1),
    so it reads 0 while a worker that has just joined still restores every standby."""
    offsets = recovery.standby_offsets
    return sum(max(highwater - max(offsets.get(tp, -1), -1), 0)
               for tp, highwater in recovery.standby_highwaters.items() if highwater >= 0)


class CardRecovery(Recovery):
    """Faust's table recovery, with the card table's changelog read ahead by its restorer, and
    its store first checked against the changelog it mirrors (see the module)."""

    async def _build_offsets(self, consumer: Any, tps: set[TP], destination: Any,
                             title: str) -> None:
        # Faust builds the active offsets right before its consistency check, the standby ones
        # after it: once per recovery, every assigned partition (standbys too) is checked here
        if destination is self.active_offsets:
            await self._check_lineage(consumer)
        await super()._build_offsets(consumer, tps, destination, title)

    async def _check_lineage(self, consumer: Any) -> None:
        by_table: dict[Any, set[TP]] = {}
        for tp in self.active_tps | self.standby_tps:
            table = self.tp_to_table.get(tp)
            if getattr(table, "restorer", None) is not None and isinstance(
                    table.restore_target(), LineageStore):
                by_table.setdefault(table, set()).add(tp)
        for table, tps in by_table.items():
            topic = table.changelog_topic.get_topic_name()
            ends = await consumer.highwaters(*tps)  # what Faust compares the offsets with
            changelog = Changelog(topic, await table.restorer.topic_id(topic),
                                  {tp.partition: end for tp, end in ends.items()
                                   if end is not None})
            verdict = reconcile(table.restore_target(), app_id=self.app.conf.id,
                                changelog=changelog, partitions={tp.partition for tp in tps})
            if verdict.keeps_all:
                continue
            for tp, owner in self.tp_to_table.items():
                if owner is table and (verdict.whole is not None
                                       or tp.partition in verdict.partitions):
                    # what Faust read of the store at assignment: gone with it
                    for offsets in (self.active_offsets, self.standby_offsets):
                        if tp in offsets:
                            offsets[tp] = None

    async def _seek_offsets(self, consumer: Any, tps: set[TP], offsets: Any,
                            title: str) -> None:
        by_table: dict[Any, dict[int, int]] = {}
        for tp in tps:
            table = self.tp_to_table.get(tp)
            if getattr(table, "restorer", None) is not None:
                by_table.setdefault(table, {})[tp.partition] = table.held_offset(tp, offsets[tp])
        for table, held in by_table.items():
            topic = table.changelog_topic.get_topic_name()
            done = await table.restorer.restore(topic, held, table.restore_target())
            for partition, offset in done.items():
                offsets[TP(topic, partition)] = offset
        await super()._seek_offsets(consumer, tps, offsets, title)


class CardTableManager(TableManager):
    """The app's table manager, with CardRecovery (`App(TableManager=...)`)."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = CardRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


class MarkerAwareRecovery(CardRecovery):
    """The card recovery; a standby partition read past its highwater counts as caught up."""

    def standby_remaining(self) -> Counter[TP]:
        remaining = super().standby_remaining()
        positions = self.app.consumer.fetch_positions()  # type: ignore[attr-defined]
        for tp, left in list(remaining.items()):
            position = positions.get(tp)
            # highwater is the end offset minus one: read up to the end, only markers were left
            if left > 0 and position is not None and position > self.standby_highwaters[tp]:
                remaining[tp] = 0
        return remaining


class TransactionalTableManager(CardTableManager):
    """The card table manager with `MarkerAwareRecovery` (the app's `TableManager` in
    exactly_once)."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = MarkerAwareRecovery(self.app, self, beacon=self.beacon,
                                                 loop=self.loop)
        return self._recovery
