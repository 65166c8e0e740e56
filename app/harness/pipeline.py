"""Driving the real pipeline (tests, chaos, benchmarks): generate, replay, wait for the worker to
drain."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from app.datagen.config import GeneratorConfig
from app.datagen.generator import generate_log
from app.datagen.log import GeneratedLog
from app.harness.procs import Spawned, free_port, wait_until
from app.harness.redisdb import flush_db, with_db
from app.kafka import topics
from app.kafka.inspect import Record, group_lag, read_topic, topic_sizes
from app.kafka.records import H_SOURCE_OFFSET, H_SOURCE_PARTITION
from app.kafka.replay import replay_messages
from app.kafka.topics import drop_topics
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings
from app.transactions.labels import LabelRecord


def make_log(**overrides: object) -> GeneratedLog:
    """A generated log whose future-dated bad messages stay future for the live validator.

    The corpus builds "ts just past now + 1 day" against `now_ms`; anchoring it an hour ahead of
    the wall clock keeps those messages invalid for the whole test run.
    """
    params: dict[str, object] = {"now_ms": time.time_ns() // 1_000_000 + 3_600_000}
    params.update(overrides)
    return generate_log(GeneratorConfig(**params))  # type: ignore[arg-type]


def with_own_service(settings: Settings, redis_db: int) -> Settings:
    """`settings` with an emptied Redis database of its own and a free action-service port."""
    port = free_port()
    redis_url = with_db(settings.effective_redis_url, redis_db)
    flush_db(redis_url)
    return settings.replace(redis_url=redis_url, action_service_port=port,
                            action_service_url=f"http://127.0.0.1:{port}")


def drop_quietly(settings: Settings) -> None:
    """Delete a test's topics afterwards; a failure to clean up warns, it fails no test."""
    try:
        asyncio.run(drop_topics(settings))
    except Exception as exc:  # noqa: BLE001 - cleanup only: reported as a warning
        warnings.warn(f"could not delete the topics of {settings.topic_prefix!r}: {exc!r}",
                      stacklevel=2)


def lines_of(log: GeneratedLog) -> list[bytes]:
    return [line for line, _kind in log.iter_lines()]


def replay(settings: Settings, lines: Sequence[bytes], rate: float | None = None) -> int:
    report = asyncio.run(replay_messages(settings, lines, rate=rate))
    assert report.errors == 0
    return report.sent


def wait_drained(settings: Settings, workers: Sequence[Spawned], *, expected: int,
                 timeout_s: float = 180.0) -> None:
    """Wait until the transactions topic holds `expected` messages and the group's lag is 0."""
    source = settings.topic(topics.TRANSACTIONS)

    def drained() -> bool:
        for w in workers:
            assert w.alive(), f"worker died:\n{w.log_tail()}"
        size = asyncio.run(topic_sizes(settings, [source]))[source]
        return size == expected and asyncio.run(group_lag(settings, settings.app_id, source)) == 0

    wait_until(drained, timeout_s=timeout_s, interval_s=1.0, what="the worker to drain the log")


def read(settings: Settings, logical: str) -> list[Record]:
    return asyncio.run(read_topic(settings, settings.topic(logical), timeout_s=120.0))


def dlq_sources(settings: Settings) -> set[tuple[str, str]]:
    """The distinct source messages in transactions.dlq, as (partition, offset) headers.

    Dead-lettering is at least once, like everything the worker writes: a batch read again after
    a crash or a failed flush dead-letters its bad messages again, under the same source offset.
    """
    return {(r.headers[H_SOURCE_PARTITION], r.headers[H_SOURCE_OFFSET])
            for r in read(settings, topics.TRANSACTIONS_DLQ)}


def produce(settings: Settings, logical: str, records: Sequence[tuple[bytes | None, bytes]],
            rate: float | None = None) -> None:
    """Produce (key, value) records to a pipeline topic, in order."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(**kafka_client_kwargs(settings),
                                    acks="all", enable_idempotence=True)
        await producer.start()
        try:
            t0 = time.monotonic()
            for i, (key, value) in enumerate(records):
                if rate:
                    ahead = i / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        await asyncio.sleep(ahead)  # pacing to the requested rate
                await producer.send(settings.topic(logical), value=value, key=key)
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(run())


def effects(redis_url: str, **client_kwargs: object) -> list[dict[str, str]]:
    """Every entry of the action service's ledger (all effects shards merged, see
    app.action_service.ledger), on a single Redis or a cluster URL."""
    from app.action_service.ledger import read_effects
    from app.redis_url import sync_client

    client = sync_client(redis_url, decode_responses=True, **client_kwargs)
    try:
        return [fields for _id, fields in read_effects(client)]
    finally:
        client.close()


def served_rows(settings: Settings) -> list[dict[str, object]]:
    """Every features.served row, decoded."""
    import orjson

    return [orjson.loads(r.value) for r in read(settings, topics.FEATURES_SERVED)]


def require_compiled_fold() -> None:
    """Refuse to check the pipeline without the compiled fold (`app.features._fold`).

    Without it the offline evaluator falls back to the online `CardState` path: the oracle would
    be the live code checking itself, and every comparison with it would pass by construction.
    """
    from app.features import kernel

    if not kernel.available():
        raise RuntimeError(
            "the end-to-end oracle needs the compiled fold app.features._fold (build it with "
            "`pip install -e .` or `make setup`): without it the offline evaluator falls back "
            "to the online CardState code it is meant to check")


def audit_served(settings: Settings, lines: Sequence[bytes],
                 labels: Sequence[LabelRecord] = ()):  # noqa: ANN201 - AuditReport
    """audit-skew of features.served against the offline evaluator over the same log, the
    merchant features from `labels` (the label log the workers read)."""
    from app.features.audit import audit
    from app.features.merchant import MerchantBook, MerchantTable
    from app.features.offline import compute_features

    require_compiled_fold()
    offline = compute_features(lines, allowed_lateness_ms=settings.allowed_lateness_ms,
                               now_ms=time.time_ns() // 1_000_000,
                               merchants=MerchantTable.of(labels), extra=("merchant_id",))
    book = MerchantBook()
    for rec in labels:
        book.add(rec)
    return audit(served_rows(settings), offline.table, labels=book)


def label_records(log: GeneratedLog) -> list[LabelRecord]:
    """The generated log's labels as `fraudstream labels` would send them."""
    import orjson

    from app.transactions.labels import parse_label_row

    now = time.time_ns() // 1_000_000
    return [parse_label_row(orjson.loads(line), now_ms=now, default_source="test")
            for chunk in log.label_chunks() for line in chunk.split(b"\n") if line]


def send_label_records(settings: Settings, labels: Sequence[LabelRecord]) -> None:
    """Produce label records to the labels topic, keyed as the label importer keys them."""
    produce(settings, topics.LABELS, [(rec.key, rec.to_json()) for rec in labels])


def live_actions(settings: Settings) -> dict[str, list[dict[str, object]]]:
    """Every action on the actions topic, grouped by idempotency key (copies included)."""
    import orjson

    out: dict[str, list[dict[str, object]]] = {}
    for r in read(settings, topics.ACTIONS):
        action = orjson.loads(r.value)
        out.setdefault(action["idempotency_key"], []).append(action)
    return out


def oracle_for(settings: Settings, lines: Sequence[bytes],
               labels: Sequence[LabelRecord] = ()):  # noqa: ANN201 - OracleRun
    """`fraudstream score` in-process: what the pipeline must emit for `lines`."""
    from app.features.merchant import MerchantTable
    from app.scoring.oracle import run_oracle
    from app.scoring.registry import ModelRegistry

    require_compiled_fold()
    registry = ModelRegistry(settings.model_dir, device="cpu")
    return run_oracle(lines, registry, version=settings.model_version,
                      allowed_lateness_ms=settings.allowed_lateness_ms,
                      now_ms=time.time_ns() // 1_000_000,
                      merchants=MerchantTable.of(labels) if labels else None)


def assert_live_matches_oracle(settings: Settings, lines: Sequence[bytes],
                               labels: Sequence[LabelRecord] = ()) -> int:
    """Live actions == oracle actions: same keys and types, scores within 1e-5."""
    live = live_actions(settings)
    oracle = {a.idempotency_key: a for a in oracle_for(settings, lines, labels).actions}
    assert set(live) == set(oracle), (
        f"missing {len(set(oracle) - set(live))}, extra {len(set(live) - set(oracle))}")
    for key, copies in live.items():
        expected = oracle[key]
        for action in copies:
            assert action["type"] == expected.type and action["txn_id"] == expected.txn_id
            assert abs(float(action["score"]) - expected.score) <= 1e-5, (key, action, expected)
            _assert_same_explanation(action.get("explanation"), expected.explanation, key)
    return len(oracle)


@dataclass(frozen=True)
class RunCounts:
    """What a finished run did, counted on its topics and the ledger (monitoring is compared
    with these, not just looked up by name)."""

    scored: int  # features.served rows: every scored transaction, redeliveries included
    dead_lettered: int  # transactions.dlq
    late: int  # transactions.late
    actions: dict[str, int]  # actions topic, by type
    effects: int  # the action service's ledger


def run_counts(settings: Settings, lines: Sequence[bytes], *, malformed: int) -> RunCounts:
    """Count what the run on `lines` produced, first checked against the oracle: one clean
    pass (no crash, so nothing read twice) must serve every accepted transaction and every
    redelivery once, dead-letter every malformed line once and apply every oracle action."""
    import orjson

    oracle = oracle_for(settings, lines)
    served = read(settings, topics.FEATURES_SERVED)
    dlq = read(settings, topics.TRANSACTIONS_DLQ)
    late = read(settings, topics.TRANSACTIONS_LATE)
    actions = Counter(orjson.loads(r.value)["type"] for r in read(settings, topics.ACTIONS))
    applied = effects(settings.effective_redis_url)
    assert len(served) == oracle.offline.accepted + oracle.offline.redelivered, len(served)
    assert len(dlq) == malformed, (len(dlq), malformed)
    assert len(late) == oracle.offline.late, (len(late), oracle.offline.late)
    assert {e["idempotency_key"] for e in applied} == {a.idempotency_key for a in oracle.actions}
    assert len(applied) == len(oracle.actions) > 0, (len(applied), len(oracle.actions))
    return RunCounts(len(served), len(dlq), len(late), dict(actions), len(applied))


def wait_dispatched(settings: Settings, timeout_s: float = 120.0) -> None:
    """Wait until the dispatcher (same group as the score agent) has consumed every action."""
    name = settings.topic(topics.ACTIONS)
    wait_until(lambda: asyncio.run(group_lag(settings, settings.app_id, name)) == 0,
               timeout_s=timeout_s, interval_s=0.5, what="the dispatcher to drain the actions")


def replay_and_settle(settings: Settings, workers: Sequence[Spawned], lines: Sequence[bytes], *,
                      timeout_s: float = 180.0) -> int:
    """Replay `lines`, then wait until `workers` have drained them (`timeout_s`) and the
    dispatcher has consumed every action; the count sent."""
    sent = replay(settings, lines)
    wait_drained(settings, workers, expected=sent, timeout_s=timeout_s)
    wait_dispatched(settings)
    return sent


def _assert_same_explanation(live: object, offline: object, key: str) -> None:
    """The worker's explanation is the oracle's: equal on the CPU provider; on CUDA (scores a
    few ulps apart) the same features' contributions within 1e-4, near-ties aside."""
    assert isinstance(live, list) and offline is not None and len(live) == len(offline), key
    expected = {c.name: c.contribution for c in offline}  # type: ignore[attr-defined]
    common = [c for c in live if c["name"] in expected]
    assert len(common) >= 3, (key, live, offline)
    assert all(abs(c["contribution"] - expected[c["name"]]) <= 1e-4 for c in common), key
