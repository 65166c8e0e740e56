"""The real topology for fault scenarios: action service + workers as processes, and the checks.

Kafka and Redis are the shared stack; each scenario gets fresh topics, a fresh consumer group
and changelog (app id), and its own flushed Redis database, so scenarios run back to back.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import redis
from aiokafka.errors import KafkaError

from app.action_service.ledger import count_replays, read_effects
from app.action_service.redis_keys import card_key
from app.actions import Action
from app.harness.evidence import event_to_effect_ms, quantile, watchdog_repairs
from app.harness.pipeline import (
    audit_served,
    dlq_sources,
    drop_quietly,
    effects,
    oracle_for,
    read,
    served_rows,
)
from app.harness.procs import (
    Spawned,
    free_port,
    http_ready,
    spawn_action_service,
    spawn_worker,
    wait_all_assigned,
    wait_until,
)
from app.harness.redisdb import flush_db, with_db
from app.harness.rollout import Rollout
from app.kafka import topics
from app.kafka.inspect import group_lag, read_topic, topic_sizes
from app.kafka.replay import replay_messages
from app.kafka.topics import ensure_topics
from app.redis_url import sync_client
from app.security.redis import redis_connection_kwargs
from app.settings import Settings
from app.transactions.labels import LabelRecord

FAULT_REDIS_DB = 5


@dataclass
class ScenarioReport:
    """What a scenario measured; `problems` lists every broken invariant (empty = pass)."""

    name: str
    expected_keys: int = 0
    effects: int = 0
    redeliveries_absorbed: int = 0
    recovery_s: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.extra.items())
        return (f"{self.name}: keys={self.expected_keys} effects={self.effects} "
                f"redeliveries_absorbed={self.redeliveries_absorbed} "
                f"recovery_s={self.recovery_s:.1f} {extra}".rstrip())


class Topology:
    """One scenario's processes and the invariants checked against the offline oracle."""

    def __init__(self, base: Settings, tmp: Path, name: str, *, progress: bool = False) -> None:
        tag = uuid.uuid4().hex[:6]
        self.name = name
        self.tmp = tmp
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.service_port = free_port()
        redis_url = with_db(base.effective_redis_url, FAULT_REDIS_DB)
        flush_db(redis_url)
        self.settings = base.replace(
            topic_prefix=f"f{tag}.", app_id=f"fault-{name}-{tag}", redis_url=redis_url,
            action_service_port=self.service_port,
            action_service_url=f"http://127.0.0.1:{self.service_port}")
        asyncio.run(ensure_topics(self.settings))
        self.service: Spawned | None = None
        self.workers: list[Spawned] = []
        self.progress = progress
        self._replayer: threading.Thread | None = None
        self._replay_error: list[BaseException] = []
        self.fault_at: float | None = None
        self.expected_keys: set[str] = set()
        self.total_messages = 0
        self.expected_served = 0
        self.extra: dict[str, object] = {}
        self.retries_seen = 0
        self.skipped_seen = 0
        #: a model version activated mid-stream (the rollout scenario): the actions expected
        #: are then each served row's under the version that served it
        self.rollout: Rollout | None = None
        #: checks a fault leaves for after recovery (evidence that it hit work in flight)
        self.after_recovery: list[Callable[[], None]] = []
        #: the label log on the labels topic (sent before the workers start): the merchant
        #: features the oracle and the audit recompute
        self.labels: Sequence[LabelRecord] = ()

    # --- processes --------------------------------------------------------------------------
    def start_service(self) -> Spawned:
        self.service = spawn_action_service(self.settings, self.tmp, port=self.service_port)
        wait_until(lambda: http_ready(f"{self.settings.action_service_url}/readyz"),
                   timeout_s=30, what="the action service")
        return self.service

    def start_worker(self, settings: Settings | None = None, *, port: int | None = None
                     ) -> Spawned:
        """A new worker; `port` of a dead one: it finds that one's local card store."""
        worker = spawn_worker(settings or self.settings, self.tmp, name=f"w{len(self.workers)}",
                              port=port)
        self.workers.append(worker)
        return worker

    def live_workers(self) -> list[Spawned]:
        return [w for w in self.workers if w.alive()]

    def close(self) -> None:
        self.retries_seen += self.worker_metric("fraudstream_dispatch_retries_total")
        self.skipped_seen += self.worker_metric("fraudstream_reread_skipped_total")
        for worker in self.workers:
            worker.stop(timeout_s=30)
        if self.service is not None:
            self.service.stop(timeout_s=30)
        proxy = getattr(self, "proxy", None)
        if proxy is not None:
            proxy.stop()

    def worker_metric(self, name: str) -> int:
        """A counter summed over the live workers' /metrics (killed workers' counts are gone)."""
        return sum(_counter(f"http://127.0.0.1:{w.port}/metrics", name)
                   for w in self.live_workers())

    def service_metric(self, name: str) -> int:
        """A counter of the action service's /metrics (0 when it does not answer)."""
        return _counter(f"{self.settings.action_service_url}/metrics", name)

    def expected_actions(self, default: Sequence[Action]) -> list[Action]:
        """The actions the pipeline must apply: `default` (the oracle's), or after a rollout
        each served row's under the model version that served it."""
        if self.rollout is None:
            return list(default)
        return self.rollout.actions(served_rows(self.settings))

    def mark_fault(self) -> None:
        """Remember when the (first) fault hit: recovery time is measured from here."""
        if self.fault_at is None:
            self.fault_at = time.monotonic()

    # --- load -------------------------------------------------------------------------------
    def replay_in_background(self, lines: Sequence[bytes], rate: float) -> None:
        def run() -> None:
            try:
                report = asyncio.run(replay_messages(self.settings, lines, rate=rate))
                if report.errors:
                    raise AssertionError(f"replay errors: {report.errors}")
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
                self._replay_error.append(exc)

        self._replayer = threading.Thread(target=run, daemon=True)
        self._replayer.start()

    def replaying(self) -> bool:
        """True while the background replay is still producing."""
        return self._replayer is not None and self._replayer.is_alive()

    def join_replay(self, timeout_s: float = 300) -> None:
        assert self._replayer is not None
        self._replayer.join(timeout_s)
        assert not self._replayer.is_alive(), "replay did not finish"
        if self._replay_error:
            raise self._replay_error[0]

    def served(self) -> int:
        """Rows the workers have written to features.served (a progress gauge for timing
        faults: in exactly_once, rows of transactions still open count too)."""
        name = self.settings.topic(topics.FEATURES_SERVED)
        gauge = self.settings.replace(processing="at_least_once")
        return asyncio.run(topic_sizes(gauge, [name]))[name]

    def wait_served(self, count: int, timeout_s: float = 180) -> None:
        wait_until(lambda: self.served() >= count, timeout_s=timeout_s, interval_s=0.2,
                   what=f"{count} served rows")

    def lags(self) -> dict[str, int]:
        return {t: asyncio.run(group_lag(self.settings, self.settings.app_id,
                                         self.settings.topic(t)))
                for t in (topics.TRANSACTIONS, topics.ACTIONS)}

    def redis(self) -> redis.Redis:
        return sync_client(self.settings.effective_redis_url, decode_responses=True,
                           **redis_connection_kwargs(self.settings))

    def replays_absorbed(self) -> int:
        client = self.redis()
        try:
            return count_replays(client)
        finally:
            client.close()

    def wait_recovered(self, expected_keys: set[str], total_messages: int,
                       timeout_s: float = 300) -> float:
        """Wait for: every message in, zero lag on both groups, every expected effect applied."""
        source = self.settings.topic(topics.TRANSACTIONS)
        last: list[str] = []

        def recovered() -> bool:
            try:
                size = asyncio.run(topic_sizes(self.settings, [source]))[source]
                lags = self.lags()
            except KafkaError as exc:  # a restarted broker still electing leaders: not yet
                last[:] = [f"Kafka not answering yet: {exc!r}"]
                return False
            applied = {e["idempotency_key"] for e in effects(self.settings.effective_redis_url)}
            drained = size == total_messages and not any(lags.values())
            expected = expected_keys
            if drained and self.rollout is not None:  # known once every row is served
                expected = {a.idempotency_key for a in self.expected_actions([])}
            state = (f"in={size}/{total_messages} lag={lags} "
                     f"effects={len(applied)}/{len(expected)} "
                     f"replays_absorbed={self.replays_absorbed()} "
                     f"workers_alive={len(self.live_workers())}")
            last[:] = [state]
            if self.progress:
                print(f"  [{self.name}] {state}", flush=True)
            return drained and expected <= applied

        try:
            wait_until(recovered, timeout_s=timeout_s, interval_s=1.0, what="full recovery")
        except AssertionError as exc:
            for worker in self.live_workers():  # what each stuck worker was waiting on
                worker.dump_diagnostics()
            raise AssertionError(f"{exc}; last seen: {last[0] if last else '-'}; "
                                 f"{self.where_missing(expected_keys)}") from None
        return time.monotonic() - (self.fault_at or time.monotonic())

    def where_missing(self, expected_keys: set[str]) -> str:
        """Where the effects still missing are: each key's action in the actions topic
        (partition@offset, committed or only read_uncommitted) and its transaction's served
        rows, so a loss tells written-never-dispatched from never-written (failure text only)."""
        try:
            applied = {e["idempotency_key"] for e in effects(self.settings.effective_redis_url)}
            missing = sorted(expected_keys - applied)
            if not missing:
                return "no effect missing"
            found: dict[str, list[str]] = {key: [] for key in missing}
            for isolation in ("exactly_once", "at_least_once"):
                name = self.settings.topic(topics.ACTIONS)
                tag = "committed" if isolation == "exactly_once" else "uncommitted"
                for r in asyncio.run(read_topic(self.settings.replace(processing=isolation),
                                                name, timeout_s=60.0)):
                    key = orjson.loads(r.value).get("idempotency_key")
                    if key in found and not (tag == "uncommitted"
                                             and f"{r.partition}@{r.offset} committed"
                                             in found[key]):
                        found[key].append(f"{r.partition}@{r.offset} {tag}")
            where = "; ".join(f"{k}: {', '.join(v) or 'not in actions'}"
                              for k, v in list(found.items())[:20])
            return f"{len(missing)} effects missing: {where}"
        except Exception as exc:  # noqa: BLE001 - a diagnosis must not hide the failure
            return f"missing effects not located ({exc!r})"

    # --- invariants ---------------------------------------------------------------------------
    def check(self, lines: Sequence[bytes], *, malformed: int,
              report: ScenarioReport) -> ScenarioReport:
        """Every invariant of the fault suite, against the oracle (`fraudstream score`)."""
        run = oracle_for(self.settings, lines, self.labels)
        actions = self.expected_actions(run.actions)
        expected = {a.idempotency_key for a in actions}
        ledger = effects(self.settings.effective_redis_url)
        per_key = Counter(e["idempotency_key"] for e in ledger)
        report.expected_keys, report.effects = len(expected), len(ledger)
        report.redeliveries_absorbed = self.replays_absorbed()
        problems = report.problems
        if set(per_key) != expected:
            problems.append(f"effect keys != oracle keys: missing {len(expected - set(per_key))}, "
                            f"invented {len(set(per_key) - expected)}")
        doubled = [k for k, n in per_key.items() if n != 1]
        if doubled:
            problems.append(f"{len(doubled)} keys have more than one effect")
        problems.extend(self._card_problems(actions))
        # a re-read after a crash may dead-letter a message twice: count distinct sources
        dlq = dlq_sources(self.settings)
        if len(dlq) != malformed:
            problems.append(f"transactions.dlq holds {len(dlq)} distinct messages, "
                            f"expected {malformed}")
        late = read(self.settings, topics.TRANSACTIONS_LATE)
        if len({orjson.loads(r.value)["txn_id"] for r in late}) != len(run.offline.late_txn_ids):
            problems.append(f"transactions.late holds {len(late)} messages, oracle says "
                            f"{len(run.offline.late_txn_ids)} late transactions")
        if read(self.settings, topics.ACTIONS_DLQ):
            problems.append("actions.dlq is not empty")
        if any(self.lags().values()):
            problems.append(f"consumer lag left: {self.lags()}")
        audit = audit_served(self.settings, lines, self.labels)
        if not audit.ok:
            problems.append(f"audit-skew: {audit.render()[:500]}")
        # source messages the pipeline processed more than once (read again after a crash or
        # rebalance); the log's own redeliveries are distinct messages and do not count
        seen: set[tuple[int, int]] = set()
        again = 0
        versions: Counter[str] = Counter()
        for r in read(self.settings, topics.FEATURES_SERVED):
            row = orjson.loads(r.value)
            position = (row["partition"], row["offset"])
            again += position in seen
            seen.add(position)
            versions[row["model_version"]] += 1
        report.extra["rereads"] = again
        if self.settings.processing == "exactly_once":
            problems.extend(self._exactly_once_problems(again, run.offline.redelivered, report))
        # the model version on every served row: the oracle's, unless one was rolled out
        if self.rollout is not None:
            problems.extend(self.rollout.problems(self.settings))
            report.extra.update(self.rollout.evidence)
        elif set(versions) != {run.model_version}:
            problems.append(f"served under {dict(versions)}, the oracle ran {run.model_version}")
        # replays the log's own redeliveries cause (an actioned txn_id sent again), so the
        # replays a fault caused can be told apart from them
        sent = Counter(_txn_id(line) for line in lines)
        report.extra["log_replays"] = sum(sent[a.txn_id] - 1 for a in actions)
        # both loops take whole chunks: the commit watchdog is a guard that must never fire
        repairs = watchdog_repairs(w.log_path for w in self.workers)
        report.extra["watchdog_repairs"] = repairs
        if repairs:
            problems.append(f"the commit watchdog re-read {repairs} partitions: messages were "
                            f"read and never processed")
        # event → effect: the transaction's broker timestamp → its effect applied
        latency = event_to_effect_ms(self.settings, ledger)
        p99, worst = quantile(latency, 0.99), max(latency, default=float("nan"))
        report.extra["effect_p99_ms"], report.extra["effect_max_ms"] = round(p99), round(worst)
        return report

    def _exactly_once_problems(self, rereads: int, log_redeliveries: int,
                               report: ScenarioReport) -> list[str]:
        """Read read_committed, features.served holds each source message once and actions
        each served row's decision once (a transaction the log sends twice is two source
        messages: served, and actioned, twice); the rows only read_uncommitted sees are those
        of the transactions a fault left open (the evidence that it hit work in flight).

        The rows marked redelivered are the log's own redeliveries (`log_redeliveries`, the
        oracle's count), no more: a card state restored with an aborted transaction's records
        (a changelog read read_uncommitted) would take the transactions done again after it for
        redeliveries, and serve them marked so, with values the audit cannot tell apart."""
        problems = []
        if rereads:
            problems.append(f"exactly_once: {rereads} source messages served twice under "
                            f"read_committed")
        rows = [orjson.loads(r.value) for r in read(self.settings, topics.FEATURES_SERVED)]
        marked = sum(1 for row in rows if row["redelivered"])
        if marked != log_redeliveries:
            problems.append(f"exactly_once: {marked} rows served as redeliveries, the log holds "
                            f"{log_redeliveries}: a card state held an uncommitted transaction's "
                            f"work")
        served_per_txn = Counter(row["txn_id"] for row in rows)
        actions = [orjson.loads(r.value) for r in read(self.settings, topics.ACTIONS)]
        per_key = Counter(a["idempotency_key"] for a in actions)
        txn_of = {a["idempotency_key"]: a["txn_id"] for a in actions}
        doubled = [k for k, n in per_key.items() if n != served_per_txn[txn_of[k]]]
        if doubled:
            problems.append(f"exactly_once: {len(doubled)} actions committed more often than "
                            f"their transaction was served")
        name = self.settings.topic(topics.FEATURES_SERVED)
        everything = asyncio.run(read_topic(self.settings.replace(processing="at_least_once"),
                                            name, timeout_s=120.0))
        report.extra["aborted_rows"] = len(everything) - len(rows)
        return problems

    def _card_problems(self, actions: Sequence[object]) -> list[str]:
        first_freeze: dict[str, str] = {}
        for action in actions:
            if action.type == "freeze_card":  # type: ignore[attr-defined]
                first_freeze.setdefault(action.card_id, action.txn_id)  # type: ignore[attr-defined]
        client = self.redis()
        try:
            wrong = []
            for card, txn in first_freeze.items():
                state = client.hgetall(card_key(card))
                if state.get("status") != "frozen" or state.get("txn_id") != txn:
                    wrong.append(card)
            # card hashes are card:{shard tag}:<card_id> (their alert lists are lists)
            frozen_cards = {k.split("}:", 1)[1] for k in client.scan_iter("card:*", _type="hash")
                            if client.hget(k, "status") == "frozen"}
            # what happened to each such card, in the order the action service applied it
            ledger = read_effects(client) if wrong else []
            story = {card: (client.hgetall(card_key(card)),
                            [(f.get("type"), f.get("txn_id"), f.get("outcome"), f.get("applied_at_ms"))
                             for _, f in ledger if f.get("card_id") == card])
                     for card in wrong[:3]}
        finally:
            client.close()
        problems = []
        if wrong:
            problems.append(f"{len(wrong)} cards not frozen by the oracle's first freeze: {wrong[:5]}")
            for card, (state, applied) in story.items():
                problems.append(f"  {card}: oracle's first freeze {first_freeze[card]}; card "
                                f"{state}; effects in applied order {applied}")
        if frozen_cards - set(first_freeze):
            problems.append(f"cards frozen that the oracle never froze: "
                            f"{sorted(frozen_cards - set(first_freeze))[:5]}")
        return problems


def _counter(url: str, name: str) -> int:
    """Counter `name` summed over its samples on the /metrics page at `url` (0 if none)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback test URL
            text = resp.read().decode()
    except OSError:
        return 0
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith((f"{name} ", f"{name}{{"))))


def _txn_id(line: bytes) -> str | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value.get("txn_id") if isinstance(value, dict) else None


def run_scenario(
    base: Settings,
    tmp: Path,
    name: str,
    fault: Callable[[Topology], None],
    *,
    txns: int = 20_000,
    rate: float = 4_000.0,
    workers: int = 2,
    seed: int = 1,
    malformed: float = 0.005,
    redelivery: float = 0.005,
    progress: bool = False,
    prepare: Callable[[Topology], None] | None = None,
    store: str = "rocksdb",
) -> ScenarioReport:
    """Start the topology, replay a generated log, inject `fault`, let it heal, check it all."""
    from app.harness.pipeline import label_records, lines_of, make_log, send_label_records

    topo = Topology(base.replace(store=store), tmp / name, name, progress=progress)
    if prepare is not None:
        prepare(topo)
    log = make_log(cards=max(500, txns // 20), txns=txns, seed=seed, malformed=malformed,
                   redelivery=redelivery, out_of_order=0.01)
    lines = lines_of(log)
    # the labels first (their merchant features reach back 7 days and more): every worker
    # folds them, and the oracle and the audit recompute the merchant features from them
    topo.labels = label_records(log)
    send_label_records(topo.settings, topo.labels)
    oracle = oracle_for(topo.settings, lines, topo.labels)
    if topo.rollout is not None:  # each served row is checked under its own version's oracle
        version = topo.rollout.version
        topo.rollout.oracles = {
            oracle.model_version: oracle,
            version: oracle_for(topo.settings.replace(model_version=version), lines,
                                topo.labels)}
    expected = {a.idempotency_key for a in oracle.actions}
    topo.expected_keys, topo.total_messages = expected, len(lines)
    topo.expected_served = oracle.offline.accepted + oracle.offline.redelivered
    report = ScenarioReport(name)
    try:
        topo.start_service()
        for _ in range(workers):
            topo.start_worker()
        # every worker in the group first: a fault at 30 % must hit a worker that holds work
        wait_all_assigned(topo.workers, topo.settings.topic(topics.TRANSACTIONS))
        topo.replay_in_background(lines, rate)
        fault(topo)
        topo.join_replay()
        report.recovery_s = topo.wait_recovered(expected, len(lines))
        for verify in topo.after_recovery:
            verify()
        topo.check(lines, malformed=log.counts.malformed, report=report)
        report.extra.update(topo.extra)
    finally:
        topo.close()
    # Only a passing scenario's topics go: a failing one's stay on the broker for inspection.
    drop_quietly(topo.settings)
    report.extra["reread_skipped"] = topo.skipped_seen
    report.extra["dispatch_retries"] = topo.retries_seen
    return report
