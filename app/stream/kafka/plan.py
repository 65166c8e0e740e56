"""What the Faust app tells its consumer: processing mode, chunk topics, transactional topics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from faust.types import TP

from app.settings import Processing

#: Awaited on every assignment before Faust's own handling, with the assignment and its generation.
AssignHook = Callable[[set[TP], int], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerPlan:
    """How `FraudConsumer` reads for its app: built once by `create_app` and set on the Faust app
    as `consumer_plan` before the consumer exists (the consumer reads it when it is made)."""

    #: exactly_once: read read_committed, leave the transactional topics' offsets to their
    #: transactions, and count the commit markers of the other chunk topics as done
    processing: Processing = "at_least_once"
    #: topics whose fetched records go to a loop as whole chunks (`FraudConsumer.chunk_queue`)
    chunk_topics: frozenset[str] = frozenset()
    #: exactly_once: topics whose offsets only the score engine's transactions commit
    transactional_topics: frozenset[str] = frozenset()
    #: awaited on every assignment before Faust's own handling (exactly_once: the transactional
    #: producers of the partitions gained fence their previous owner before anything is read)
    assign_hooks: tuple[AssignHook, ...] = ()

    @property
    def gapped_topics(self) -> frozenset[str]:
        """exactly_once: chunk topics written in transactions by others (actions), whose commit
        markers and aborted records are offsets no consumer is handed (see `_fill_gaps`)."""
        if self.processing != "exactly_once":
            return frozenset()
        return self.chunk_topics - self.transactional_topics
