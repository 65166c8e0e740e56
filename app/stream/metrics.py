"""Prometheus metrics of the worker (exposed on the worker's web port at /metrics)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any, Final

from prometheus_client import Counter, Gauge, Histogram

DLQ_MESSAGES: Final = Counter(
    "fraudstream_dlq_messages_total",
    "Transactions rejected to transactions.dlq, by reason code and field.",
    ["reason", "field"],
)
LATE_MESSAGES: Final = Counter(
    "fraudstream_late_messages_total", "Transactions routed to transactions.late."
)
REDELIVERED: Final = Counter(
    "fraudstream_redelivered_total",
    "Transactions already folded into state, re-scored with their first features.",
)
REREAD_SKIPPED: Final = Counter(
    "fraudstream_reread_skipped_total",
    "Messages read again after a crash or rebalance that card state already held and no longer "
    "remembers (their outputs were flushed the first time): nothing re-emitted.",
)
CARDS_CACHED: Final = Gauge(
    "fraudstream_cards_cached",
    "Decoded card states the score engine keeps between batches (bounded by "
    "FRAUDSTREAM_CARD_CACHE).",
)
CARD_STORE_MEMORY: Final = Gauge(
    "fraudstream_card_store_memory_bytes",
    "Memory the card store (RocksDB) holds, by kind: memtables, block_cache, table_readers "
    "(bounded by the store's options; the rest of the worker's RSS is the process's own).",
    ["kind"],
)
CARDS_RESTORED: Final = Counter(
    "fraudstream_cards_restored_total",
    "Card changelog records read back into the store ahead of Faust's recovery.",
)
REREAD_DROPPED: Final = Counter(
    "fraudstream_reread_dropped_total",
    "Messages read again after a rewind that this worker already processed in the same "
    "generation: not processed twice.",
)
SEQUENCE_HELD: Final = Counter(
    "fraudstream_sequence_held_total",
    "Events held back unacknowledged: past a gap in their partition, or of a revoked partition.",
    ["topic"],
)
HELD_WAITS: Final = Counter(
    "fraudstream_held_waits_total",
    "Times the score engine stopped taking input until what it had served became durable "
    "(it held FRAUDSTREAM_MAX_HELD messages: the load is above what it makes durable in step).",
)
REWINDS: Final = Counter(
    "fraudstream_rewinds_total",
    "Partitions sent back to re-read from an offset, by topic and reason (gap, still waiting, "
    "hand-over interrupted, fetched while paused, commit stuck).",
    ["topic", "reason"],
)
FETCH_HANDED_BACK: Final = Counter(
    "fraudstream_fetch_handed_back_total",
    "Records fetched for a partition that was paused meanwhile, handed back to be read again.",
    ["topic"],
)
SCORED: Final = Counter("fraudstream_scored_total", "Transactions scored.")
ACTIONS_EMITTED: Final = Counter(
    "fraudstream_actions_emitted_total", "Actions produced to the actions topic.", ["type"]
)
RULE_HITS: Final = Counter(
    "fraudstream_rule_hits_total",
    "Scored rows a rule held for (active and log_only alike; an active rule decides only the "
    "rows no list entry or earlier rule decided), by rule id, version and mode.",
    ["rule", "version", "mode"],
)
BATCH_SIZE: Final = Histogram(
    "fraudstream_batch_size", "Micro-batch sizes.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
)
CHECKPOINT_STEPS: Final = Histogram(
    "fraudstream_checkpoint_merged_batches",
    "Batches whose card state was made durable together (one changelog record per card).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
#: The latency budget per hop (seconds). `append_to_engine`: broker append (the message's
#: timestamp) → the score engine took it; `features`: validate and fold a batch; `model`: score
#: it; `outputs_acked`: outputs sent → acknowledged by the broker; `event_to_served`: broker
#: append → served row and actions acknowledged; `action_answered`: one POST to the action
#: service; `event_to_effect`: broker append of the transaction → the action service answered.
HOP_SECONDS: Final = Histogram(
    "fraudstream_hop_seconds", "Latency of each hop from event to effect, by hop.", ["hop"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
             10.0, 30.0),
)
LAG_SECONDS: Final = Gauge(
    "fraudstream_consumer_lag_seconds",
    "Freshness per partition: age of the newest message the engine took, 0 when caught up.",
    ["topic", "partition"],
)
SCORER_PROVIDER: Final = Gauge(
    "fraudstream_scorer_provider_info", "Execution provider of the active model (1 = active).",
    ["provider", "model_version"],
)
MODEL_ACTIVATIONS: Final = Counter(
    "fraudstream_model_activations_total", "Model activations seen, by result.", ["result"]
)
LOOP_LAG: Final = Histogram(
    "fraudstream_event_loop_lag_seconds",
    "How late a 100 ms timer fires: time the event loop was held by other work.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
GC_PAUSE: Final = Histogram(
    "fraudstream_gc_pause_seconds",
    "Garbage-collector pauses of the worker process (the GIL is held), by generation.",
    ["generation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
LOOP_LAG_MAX: Final = Gauge(
    "fraudstream_event_loop_lag_max_seconds", "Longest event-loop stall seen by this worker."
)


def observe_many(child: Any, values: Iterable[float]) -> None:
    """`Histogram.observe` for many values: one lock round per bucket hit, not per value.

    `child` is a labelled (or unlabelled) Histogram; values land in the same buckets, with the
    same sum and count, as one `observe` each would give.
    """
    bounds = child._upper_bounds
    counts = [0] * len(bounds)
    total = 0.0
    for value in values:
        counts[bisect_left(bounds, value)] += 1
        total += value
    for bucket, count in zip(child._buckets, counts, strict=True):
        if count:
            bucket.inc(count)
    child._sum.inc(total)
SHADOW_MODEL: Final = Gauge(
    "fraudstream_shadow_model_info", "The shadow model scored beside the active one (1).",
    ["model_version"],
)
SHADOW_MODELS: Final = Counter(
    "fraudstream_shadow_models_total",
    "Shadow model changes seen, by result (accepted, refused, stopped).", ["result"]
)
SHADOW_SCORED: Final = Counter(
    "fraudstream_shadow_scored_total", "Transactions also scored by the shadow model."
)
SHADOW_DISAGREED: Final = Counter(
    "fraudstream_shadow_disagreed_total",
    "Shadow-scored transactions whose would-be decision differs from the active model's.",
)
