"""One screen of `fraudstream watch`, computed from two readings (pure: no I/O, no clock)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.watch.drift import DriftView, drift_view
from app.watch.samples import Samples, bucket_delta, buckets, counter_rate, quantile

#: The hops in the order an event meets them (app.stream.metrics.HOP_SECONDS).
HOPS: tuple[str, ...] = ("append_to_engine", "features", "model", "outputs_acked",
                         "event_to_served", "action_answered", "event_to_effect")

#: Worker counters whose sum is every transaction the workers finished with.
PROCESSED = ("fraudstream_scored_total", "fraudstream_late_messages_total",
             "fraudstream_dlq_messages_total")


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One partition of the transactions topic as Kafka sees it."""

    end: int
    committed: int | None  # None: the group never committed here

    @property
    def lag(self) -> int:
        return max(0, self.end - (self.committed or 0))


@dataclass(frozen=True, slots=True)
class Reading:
    """Everything watch reads at one moment."""

    at_s: float  # monotonic seconds
    workers: Samples
    workers_up: int
    workers_total: int
    service: Samples
    service_up: bool
    offsets: Mapping[int, PartitionOffsets]  # transactions topic, by partition
    kafka_error: str | None = None
    quality: Samples = field(default_factory=Samples)  # `fraudstream quality`'s page
    quality_up: bool = False


@dataclass(frozen=True, slots=True)
class HopRow:
    hop: str
    p50_s: float | None
    p99_s: float | None
    count: int  # observations behind the quantiles


@dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    lag_messages: int
    lag_seconds: float | None


@dataclass(frozen=True, slots=True)
class Budget:
    """Event → served row against the latency budget, over the last minute of readings."""

    budget_s: float
    p99_s: float | None
    within: float | None  # share of the events served within the budget
    events: int
    window_s: float  # how much of the last minute the readings cover

    @property
    def met(self) -> bool | None:
        return None if self.p99_s is None else self.p99_s <= self.budget_s


@dataclass(frozen=True, slots=True)
class QualityRow:
    """Live quality over every day kept (app.quality): all labels so far, and at 7 days."""

    precision: float | None
    recall: float | None
    precision_7d: float | None
    recall_7d: float | None
    freezes: int
    fraud: int


def quality_of(s: Samples) -> QualityRow | None:
    """The day=all figures of `fraudstream quality`'s page (None: no page)."""
    if not s.has("fraudstream_quality_labels"):
        return None

    def get(name: str, maturity: str) -> float | None:
        found = s.get(f"fraudstream_quality_{name}").get(
            (("day", "all"), ("maturity", maturity)))
        return found

    return QualityRow(get("precision", "all"), get("recall", "all"), get("precision", "7d"),
                      get("recall", "7d"), int(get("freezes", "all") or 0),
                      int(get("fraud", "all") or 0))


@dataclass(frozen=True, slots=True)
class Frame:
    """What one refresh shows."""

    in_per_s: float | None
    out_per_s: float | None
    actions_per_s: float | None
    partitions: list[PartitionRow]
    hops: list[HopRow]
    hops_recent: bool  # quantiles over the last interval (True) or since start (False)
    scored: int
    dlq: int
    late: int
    effects: int
    replays_absorbed: int
    models: list[tuple[str, str]]  # (model_version, provider) serving now
    workers_up: int
    workers_total: int
    service_up: bool
    budget: Budget | None = None
    drift: DriftView | None = None
    problems: list[str] = field(default_factory=list)
    quality: QualityRow | None = None
    reviews_open: int | None = None  # the review queue (None: the service did not say)
    review_oldest_s: float | None = None
    rule_hits: dict[str, float] = field(default_factory=dict)  # by rule id, all versions

    @property
    def lag_messages(self) -> int:
        return sum(p.lag_messages for p in self.partitions)


def _processed(s: Samples) -> float:
    return sum(s.total(name) for name in PROCESSED)


def budget_of(now: Reading, since: Reading | None, budget_s: float) -> Budget:
    """Event → served row between `since` (about a minute ago; None: since the start) and now:
    p99 and the share within `budget_s` (counted at the largest histogram bound ≤ the budget,
    so never overstated)."""
    name, hop = "fraudstream_hop_seconds", "event_to_served"
    cum = buckets(now.workers, name, hop=hop)
    if since is not None:
        cum = bucket_delta(cum, buckets(since.workers, name, hop=hop))
    events = int(cum[-1][1]) if cum else 0
    inside = max((n for le, n in cum if le <= budget_s), default=0.0)
    return Budget(budget_s, quantile(0.99, cum) if events else None,
                  inside / events if events else None, events,
                  now.at_s - since.at_s if since is not None else 0.0)


def build_frame(now: Reading, before: Reading | None, *, group: str,
                minute_ago: Reading | None = None, budget_s: float = 0.05,
                drift_min_events: int = 200, drift_thresholds: tuple[float, float] = (0.1, 0.25)
                ) -> Frame:
    """The screen for reading `now`; rates and recent quantiles need the previous reading, the
    latency budget's view the oldest reading of the last minute (`minute_ago`)."""
    dt = now.at_s - before.at_s if before is not None else 0.0
    prev = before
    ends_now = sum(p.end for p in now.offsets.values())
    in_rate = (counter_rate(ends_now, sum(p.end for p in prev.offsets.values()), dt)
               if prev is not None and prev.offsets and now.offsets else None)
    out_rate = counter_rate(_processed(now.workers),
                            _processed(prev.workers) if prev else None, dt)
    actions_rate = counter_rate(now.workers.total("fraudstream_actions_emitted_total"),
                                prev.workers.total("fraudstream_actions_emitted_total")
                                if prev else None, dt)
    lag_s = now.workers.by_label("fraudstream_consumer_lag_seconds", "partition")
    partitions = [PartitionRow(p, off.lag, lag_s.get(str(p)))
                  for p, off in sorted(now.offsets.items())]
    hops, recent = _hop_rows(now, prev)
    models = sorted((dict(labels).get("model_version", "?"), dict(labels).get("provider", "?"))
                    for labels, v in now.workers.get("fraudstream_scorer_provider_info").items()
                    if v > 0)
    problems = []
    if now.workers_up < now.workers_total:
        problems.append(f"{now.workers_total - now.workers_up} of {now.workers_total} worker "
                        f"metrics pages did not answer")
    if not now.service_up:
        problems.append("the action service's /metrics did not answer")
    if now.kafka_error:
        problems.append(f"Kafka offsets of group {group}: {now.kafka_error}")
    return Frame(
        in_per_s=in_rate, out_per_s=out_rate, actions_per_s=actions_rate,
        partitions=partitions, hops=hops, hops_recent=recent,
        scored=int(now.workers.total("fraudstream_scored_total")),
        dlq=int(now.workers.total("fraudstream_dlq_messages_total")),
        late=int(now.workers.total("fraudstream_late_messages_total")),
        effects=int(now.service.total("action_service_effects_applied_total")),
        replays_absorbed=int(now.service.total("action_service_replays_absorbed_total")),
        models=list(dict.fromkeys(models)),
        workers_up=now.workers_up, workers_total=now.workers_total,
        service_up=now.service_up, budget=budget_of(now, minute_ago, budget_s),
        drift=drift_view(now.workers, min_events=drift_min_events,
                         watch=drift_thresholds[0], alert=drift_thresholds[1]),
        problems=problems, quality=quality_of(now.quality) if now.quality_up else None,
        reviews_open=(int(now.service.total("action_service_reviews_open"))
                      if now.service.has("action_service_reviews_open") else None),
        review_oldest_s=(now.service.total("action_service_review_oldest_age_seconds")
                         if now.service.has("action_service_review_oldest_age_seconds")
                         else None),
        rule_hits=now.workers.by_label("fraudstream_rule_hits_total", "rule"),
    )


def _hop_rows(now: Reading, prev: Reading | None) -> tuple[list[HopRow], bool]:
    """p50/p99 per hop over the last interval when it saw events, else since the start."""
    name = "fraudstream_hop_seconds"
    current = {hop: buckets(now.workers, name, hop=hop) for hop in HOPS}
    recent = {hop: bucket_delta(c, buckets(prev.workers, name, hop=hop)) if prev else c
              for hop, c in current.items()}
    use_recent = prev is not None and any(c and c[-1][1] > 0 for c in recent.values())
    chosen = recent if use_recent else current
    rows = []
    for hop in HOPS:
        cum = chosen[hop]
        count = int(cum[-1][1]) if cum else 0
        rows.append(HopRow(hop, quantile(0.5, cum), quantile(0.99, cum), count))
    return rows, use_recent
