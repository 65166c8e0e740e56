"""Every worker's one reader of the control topic: lists, rules, activations and the shadow.

It reads the control partition from its start (a broadcast: no consumer group), folds lists
and rules whole (app.control.fold) and hands each new snapshot to the scoring stage, which
swaps it in between batches; activations and shadow changes at or after `start_offset` (the
end of the partition when the worker read its model at start) go to their handlers. `ready`
is set once the records present at start have been read: no transaction is decided before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from prometheus_client import Gauge

from app.control.fold import ControlFold
from app.kafka import topics
from app.kafka.inspect import start_or_close
from app.rules.ruleset import RuleSet
from app.scoring.lists import Lists
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings

log = logging.getLogger(__name__)

#: A worker that has not read the control topic this long after starting says so in its log
#: (it keeps waiting: scoring without a block-list or rule it was given would be wrong).
READY_WARN_S: Final = 30.0

LIST_ENTRIES: Final = Gauge("fraudstream_list_entries",
                            "Allow/block list entries this worker applies, by list.", ["list"])
RULES: Final = Gauge("fraudstream_rules", "Rules this worker evaluates, by mode.", ["mode"])
CONTROL_OFFSET: Final = Gauge("fraudstream_control_offset",
                              "The control-topic offset this worker has read up to.")


@dataclass(frozen=True, slots=True)
class ControlHandlers:
    """Where the follower hands what it read."""

    lists: Callable[[Lists, int], None]  # the snapshot and the offset it was read through
    rules: Callable[[RuleSet, int], None]
    activation: Callable[[str], Awaitable[None]]
    shadow: Callable[[str | None], Awaitable[None]]


async def follow_control(settings: Settings, start_offset: int, handlers: ControlHandlers,
                         ready: asyncio.Event, *, poll_s: float = 0.5) -> None:
    """Follow the control partition forever (see the module doc)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(settings.topic(topics.CONTROL), 0)
    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings), enable_auto_commit=False,
                                isolation_level=settings.isolation_level)
    await start_or_close(consumer)
    fold = ControlFold()
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = (await consumer.end_offsets([tp]))[tp]
        lists_changed = rules_changed = True
        while True:
            position = await consumer.position(tp)
            CONTROL_OFFSET.set(position)
            if not ready.is_set() and position >= end:
                ready.set()
                log.info("control topic read through offset %d: %d list entries, %d rules",
                         position, len(fold.lists()), len(fold.rules()))
            if ready.is_set():
                if lists_changed:
                    handlers.lists(_counted_lists(fold.lists()), position)
                if rules_changed:
                    handlers.rules(_counted_rules(fold.rules()), position)
                lists_changed = rules_changed = False
            batch = await consumer.getmany(tp, timeout_ms=int(poll_s * 1000))
            for msg in batch.get(tp, []):
                change = fold.apply(msg.key, msg.value)
                if change is None:
                    continue
                if change.part == "lists":
                    lists_changed = True
                elif change.part == "rules":
                    rules_changed = True
                elif msg.offset < start_offset:
                    continue  # in force before the worker started: it loaded that model
                elif change.part == "activation":
                    await handlers.activation(change.version)  # type: ignore[arg-type]
                else:
                    await handlers.shadow(change.version)
    finally:
        await consumer.stop()


def _counted_lists(lists: Lists) -> Lists:
    for name in ("allow", "block"):
        LIST_ENTRIES.labels(name).set(sum(1 for e in lists.entries.values() if e.list == name))
    return lists


def _counted_rules(rules: RuleSet) -> RuleSet:
    for mode in ("active", "log_only"):
        RULES.labels(mode).set(sum(1 for r in rules.rules if r.mode == mode))
    return rules


async def wait_ready(ready: asyncio.Event) -> None:
    """Wait for the first read of the control topic, saying so in the log while it takes long."""
    while True:
        try:
            await asyncio.wait_for(ready.wait(), READY_WARN_S)
            return
        except TimeoutError:
            log.warning("still reading the lists and rules from the control topic; "
                        "not scoring until they are read")
