"""exactly_once: table recovery that knows a transactional changelog ends in a commit marker.

Faust takes a changelog partition as caught up when it has applied the record at its end
offset minus one. In exactly_once every durable point ends the card changelog's transaction
with a commit marker, a control record no consumer is ever handed, so that offset never
arrives. Active partitions are read to their end offset by the card restorer
(app.stream.restore), which reports the offset before the end as held, marker or record, so
Faust has nothing left to read for them. Standby partitions are followed by Faust's consumer:
one whose fetch position has passed its highwater counts as caught up (only markers were left),
or Faust's `standby_remaining_total()` would never reach 0 and it would never declare its
standbys ready (`on_standbys_ready`).
"""

from __future__ import annotations

from collections import Counter

from faust.tables.recovery import Recovery
from faust.types import TP

from app.stream.restore import CardRecovery, CardTableManager


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
