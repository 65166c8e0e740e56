"""exactly_once: table recovery that knows a transactional changelog ends in a commit marker.

Faust takes a changelog partition as restored when it has applied the record at its end offset
minus one. In exactly_once every durable point ends the card changelog's transaction with a
commit marker, a control record no consumer is ever handed: that offset never arrives and
recovery would wait for ever (Faust's own exactly-once mode has the same check, keyed to its
processing guarantee, which fraudstream does not set: its transactions are its own,
app.stream.txnsink). A partition whose fetch position has passed the end offset is restored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.types import TP


class MarkerAwareRecovery(Recovery):
    """Faust's recovery; a partition read past its highwater counts as restored."""

    def _past_markers(self, remaining: Counter[TP], highwaters: Mapping[TP, int]) -> Counter[TP]:
        positions = self.app.consumer.fetch_positions()  # type: ignore[attr-defined]
        for tp, left in list(remaining.items()):
            position = positions.get(tp)
            # highwater is the end offset minus one: read up to the end, only markers were left
            if left > 0 and position is not None and position > highwaters[tp]:
                remaining[tp] = 0
        return remaining

    def active_remaining(self) -> Counter[TP]:
        return self._past_markers(super().active_remaining(), self.active_highwaters)

    def standby_remaining(self) -> Counter[TP]:
        return self._past_markers(super().standby_remaining(), self.standby_highwaters)


class TransactionalTableManager(TableManager):
    """Faust's table manager with `MarkerAwareRecovery` (the app's `TableManager` setting)."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = MarkerAwareRecovery(self.app, self, beacon=self.beacon,
                                                 loop=self.loop)
        return self._recovery
