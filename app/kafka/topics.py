"""The pipeline's Kafka topics: their logical names and idempotent creation."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final

from app.kafka.inspect import admin_client
from app.settings import Settings

log = logging.getLogger(__name__)

TRANSACTIONS: Final = "transactions"
TRANSACTIONS_DLQ: Final = "transactions.dlq"
TRANSACTIONS_LATE: Final = "transactions.late"
FEATURES_SERVED: Final = "features.served"
ACTIONS: Final = "actions"
#: Both models' scores and would-be decisions while a shadow model runs (app.stream.engine.shadow).
FEATURES_SHADOW: Final = "features.shadow"
ACTIONS_DLQ: Final = "actions.dlq"
#: Fraud labels (chargebacks, confirmed fraud, analyst decisions; see app.transactions.labels)
#: and the rows of label files that were refused. Keyed by card_id (else txn_id).
LABELS: Final = "labels"
LABELS_DLQ: Final = "labels.dlq"
#: Compacted, one partition: which model every worker serves (see app.stream.feeds.control).
CONTROL: Final = "fraudstream.control"

#: Every topic the pipeline reads or writes; all are keyed by card_id.
PIPELINE_TOPICS: Final = (
    TRANSACTIONS, TRANSACTIONS_DLQ, TRANSACTIONS_LATE, FEATURES_SERVED, ACTIONS, ACTIONS_DLQ,
    FEATURES_SHADOW,
)
#: The fraud team's topics: not read by the worker, created with the pipeline's.
LABEL_TOPICS: Final = (LABELS, LABELS_DLQ)


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """What `ensure_topics` did: topics created and topics that already existed."""

    created: tuple[str, ...]
    existing: tuple[str, ...]


async def ensure_topics(settings: Settings, *, timeout_s: float = 30.0) -> TopicPlan:
    """Create every pipeline topic with explicit partitions and replication (idempotent).

    An existing topic with a different partition count is reported, not altered: changing it
    would move cards between partitions and break per-card ordering and state.
    """
    from aiokafka.admin import NewTopic

    names = [settings.topic(t) for t in (*PIPELINE_TOPICS, *LABEL_TOPICS)]
    async with admin_client(settings, timeout_s=timeout_s) as admin:
        present = set(await admin.list_topics())
        missing = [n for n in names if n not in present]
        control = settings.topic(CONTROL)
        new = [NewTopic(n, settings.topic_partitions, settings.replication) for n in missing]
        if control not in present:
            new.append(NewTopic(control, 1, settings.replication,
                                topic_configs={"cleanup.policy": "compact"}))
            missing.append(control)
        if new:
            await admin.create_topics(new, timeout_ms=int(timeout_s * 1000))
            await _wait_visible(admin, missing, timeout_s)
        existing = [n for n in names if n in present]
        if existing:
            described = await admin.describe_topics(existing)
            for topic in described:
                count = len(topic["partitions"])
                if count != settings.topic_partitions:
                    log.warning("topic %s has %d partitions, settings say %d; left as is",
                                topic["topic"], count, settings.topic_partitions)
        return TopicPlan(tuple(missing), tuple(existing))


async def drop_topics(settings: Settings, *, timeout_s: float = 30.0) -> tuple[str, ...]:
    """Delete a throwaway deployment's topics: its prefixed pipeline topics and Faust's own.

    Faust names its changelogs and assignor topic after the app id (`{app_id}-...`), so the
    dispatch app and any `{app_id}-suffix` group go too. Meant for tests and demos on a shared
    broker; refused without a topic prefix, which would match every unprefixed topic.
    """
    if not settings.topic_prefix:
        raise ValueError("drop_topics needs a topic_prefix: it would match every topic")
    owned = (settings.topic_prefix, f"{settings.app_id}-")
    async with admin_client(settings, timeout_s=timeout_s) as admin:
        names = sorted(n for n in await admin.list_topics() if n.startswith(owned))
        if names:
            reply = await admin.delete_topics(names, timeout_ms=int(timeout_s * 1000))
            failed = {t[0]: t[1] for t in reply.topic_error_codes if t[1] != 0}
            if failed:
                raise RuntimeError(f"deleting topics failed (Kafka error codes): {failed}")
        return tuple(names)


async def _wait_visible(admin: object, names: list[str], timeout_s: float) -> None:
    """Wait until every partition of `names` has an elected leader.

    A topic listed by the controller can still answer NotLeaderForPartition for a moment; a
    producer that starts then logs a warning per partition and retries. Ready means leaders.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        present = set(await admin.list_topics())  # type: ignore[attr-defined]
        if all(n in present for n in names) and await _leaders_elected(admin, names):
            return
        await asyncio.sleep(0.2)  # poll with a deadline
    raise TimeoutError(f"topics without a leader after {timeout_s:.0f}s: {names}")


async def _leaders_elected(admin: object, names: list[str]) -> bool:
    described = await admin.describe_topics(names)  # type: ignore[attr-defined]
    return len(described) == len(names) and all(
        t.get("error_code", 0) == 0 and t["partitions"]
        and all(p.get("leader", -1) >= 0 and p.get("error_code", 0) == 0 for p in t["partitions"])
        for t in described)
