"""The fault scenarios: what each one breaks, and when (shared by the fault suite and `fraudstream
chaos`)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from aiokafka.errors import KafkaError

from app.action_service.redis_keys import EFFECTS_STREAMS
from app.control.publisher import publish_activation
from app.harness.brokers import leader_load, partitions
from app.harness.procs import (
    Spawned,
    free_port,
    kill_with_reads_uncommitted,
    source_reads,
    wait_all_assigned,
    wait_until,
)
from app.harness.proxy import FaultProxy
from app.harness.rollout import Rollout, add_shifted_version
from app.harness.topology import Topology
from app.kafka import topics
from app.kafka.inspect import committed_offsets, group_lag, partition_ends, topic_sizes
from app.settings import Settings
from app.stack.kafka_cluster import KafkaCluster
from app.stack.manager import Stack
from app.stack.redis_cluster import RedisCluster


def card_changelog(settings: Settings) -> str:
    """The card table's changelog topic: Faust names it after the app id and the table."""
    return f"{settings.app_id}-card_state-changelog"


Fault = Callable[[Topology], None]


@dataclass(frozen=True)
class Scenario:
    """A named fault plus the log it runs on (keyword arguments of run_scenario)."""

    fault: Fault
    params: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[Topology], None] | None = None
    needs_local: str | None = None  # "kafka" / "redis": skipped when that service is external
    #: runs only on the cluster profile (`make test-fault-cluster`); skipped on the single node
    needs_cluster: bool = False
    kills: bool = False  # must show redelivered work after recovery
    about: str = ""  # one line for `fraudstream chaos --list`


def _at(topo: Topology, fraction: float) -> None:
    """Block until `fraction` of the log's transactions have been served."""
    topo.wait_served(int(fraction * topo.expected_served))


def _actions_grew(topo: Topology) -> None:
    """Block until a new action is produced (kill right after, before the next commit)."""
    name = topo.settings.topic(topics.ACTIONS)
    first = asyncio.run(topic_sizes(topo.settings, [name]))[name]
    wait_until(lambda: asyncio.run(topic_sizes(topo.settings, [name]))[name] > first,
               timeout_s=120, interval_s=0.05, what="a new action")


def _kill_holding_work(topo: Topology, victim: Spawned, attempts: int = 50) -> None:
    """SIGKILL `victim` while it holds processed, uncommitted messages (acked since its last
    1 s commit): the survivor must read them again, so the kill is sure to test redelivery.

    Its page can show acked messages just before a commit takes them, so the victim is first
    frozen (SIGSTOP: it commits nothing more), given 200 ms for a commit already on the wire
    to land, and killed only once the group's committed offsets, asked of the broker, are
    still at or below a message it acked. Otherwise it resumes (SIGCONT) and the wait goes on.
    A frozen second is far inside the 10 s session timeout."""
    source = topo.settings.topic(topics.TRANSACTIONS)

    def acked_from() -> dict[str, int]:
        """The victim's source partitions holding acked, uncommitted messages: the first."""
        try:
            parts = victim.debug("consumer")["partitions"]
        except OSError:  # its web page busy or not up: ask again
            return {}
        return {tp: p["acked_min"] for tp, p in parts.items()
                if tp.startswith(source + ":") and p["acked"] and p["acked_min"] is not None}

    for _ in range(attempts):
        held = wait_until(acked_from, timeout_s=60, interval_s=0.02,
                          what=f"worker {victim.port} to hold acked, uncommitted messages")
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(0.2)  # a commit request already sent is applied by the broker meanwhile
        committed = asyncio.run(committed_offsets(topo.settings, topo.settings.app_id, source))
        # partitions the survivor must read again from before the victim's acked messages
        reread = sum(1 for tp, first in held.items() if committed.get(tp, 0) <= first)
        if reread:
            topo.mark_fault()
            victim.kill()
            before = int(topo.extra.get("killed_holding", 0))  # type: ignore[call-overload]
            topo.extra["killed_holding"] = before + reread
            return
        os.kill(victim.pid, signal.SIGCONT)  # a commit took them: try again
    raise AssertionError(f"worker {victim.port} never held acked, uncommitted messages at a "
                         f"freeze ({attempts} tries)")


def kill_worker_five_times(topo: Topology) -> None:
    rng = random.Random(5)
    for i, fraction in enumerate(sorted(rng.uniform(0.1, 0.85) for _ in range(5))):
        _at(topo, fraction)
        if i % 2:
            _actions_grew(topo)  # right after actions were produced, before the offset commit
        victim = rng.choice(topo.live_workers())
        topo.mark_fault()
        victim.kill()
        topo.start_worker()


def _store_offsets(topo: Topology, port: int) -> dict[int, int]:
    """The changelog offsets a stopped worker's card store holds, read from its directory."""
    from app.stream.app import worker_datadir
    from app.stream.state.carddb import CardDBOptions, held_offsets, open_db

    datadir = worker_datadir(topo.settings.replace(state_dir=topo.tmp / "state"), port)
    paths = list(datadir.glob("**/card_state.cards.rocksdb"))
    if not paths:
        return {}
    db = open_db(paths[0], CardDBOptions())
    try:
        return held_offsets(db)
    finally:
        db.close()


def _tail_restored(topo: Topology, worker: Spawned, held: dict[int, int],
                   at_kill: dict[int, int]) -> None:
    """Once `worker` (restarted on its own store, which held `held`) serves: what it restored
    of each changelog partition is at most the changelog after the offset its store held (a
    store thrown away would read each partition whole); the records the store was behind the
    changelog at the kill (its last write before it) and the restored ones go to the report."""
    changelog = card_changelog(topo.settings)
    source = topo.settings.topic(topics.TRANSACTIONS)

    def serving() -> dict[str, int] | None:
        try:
            reads = source_reads(worker, source)
            page = worker.debug("consumer")["cards"]
        except OSError:
            return None
        if not reads or any(r is None for r in reads.values()):
            return None
        return page["restored_by_partition"]

    restored = {int(p): n for p, n in wait_until(
        serving, timeout_s=120, interval_s=0.1,
        what=f"worker {worker.port} to serve after its restart").items()}
    now = asyncio.run(partition_ends(topo.settings, changelog))
    tail = {p: now.get(p, 0) - (held.get(p, -1) + 1) for p in restored}
    over = {p: (n, tail[p]) for p, n in restored.items() if n > tail[p]}
    assert not over, (f"worker {worker.port} restored more than the changelog after its "
                      f"store's offsets (partition: (restored, tail)): {over}")
    for key, value in (("tail_restored", sum(restored.values())),
                       ("store_behind_at_kill", sum(max(0, at_kill.get(p, 0) - (o + 1))
                                                    for p, o in held.items())),
                       ("full_restore_would_read", sum(now.get(p, 0) for p in restored))):
        topo.extra[key] = int(topo.extra.get(key, 0)) + value  # type: ignore[call-overload]


def kill_worker_restart_in_place(topo: Topology) -> None:
    """SIGKILL a worker three times, each time restarted on its own port: it finds its local
    card store and reads only the changelog after the offsets it holds."""
    rng = random.Random(7)
    changelog = card_changelog(topo.settings)
    exactly_once = topo.settings.processing == "exactly_once"
    # exactly_once waits for an open transaction of the victim's own at each kill, and its
    # restarts take longer (the group's transactions are fenced first): its kills come earlier,
    # so the third still finds the log flowing
    last = 0.6 if exactly_once else 0.8
    for fraction in sorted(rng.uniform(0.15, last) for _ in range(3)):
        _at(topo, fraction)
        victim = rng.choice(topo.live_workers())
        at_kill = asyncio.run(partition_ends(topo.settings, changelog))
        if exactly_once:
            # killed while a transaction of its holds served rows: they are aborted, and its
            # store, restarted in place, must not hold what those transactions wrote
            kill_with_reads_uncommitted(
                topo.settings, victim, topo.settings.topic(topics.TRANSACTIONS), attempts=150,
                before_kill=topo.mark_fault,
                open_in=topo.settings.topic(topics.FEATURES_SERVED))
            topo.extra["aborted_rows_required"] = 1
        else:
            _kill_holding_work(topo, victim)
        held = _store_offsets(topo, victim.port)
        assert held, f"worker {victim.port}'s store held nothing at the kill"
        _tail_restored(topo, topo.start_worker(port=victim.port), held, at_kill)


def kill_worker_for_good(topo: Topology) -> None:
    _at(topo, 0.3)
    if topo.settings.processing == "exactly_once":
        # its acks are its transactions' commits: work in open transactions instead
        # ... and only while a transaction of its holds served rows (HW above LSO): the
        # evidence is then those rows aborted, seen by read_uncommitted readers only
        owned, unfinished = kill_with_reads_uncommitted(
            topo.settings, topo.workers[0], topo.settings.topic(topics.TRANSACTIONS),
            before_kill=topo.mark_fault,
            open_in=topo.settings.topic(topics.FEATURES_SERVED))
        topo.extra["victim_partitions"] = owned
        topo.extra["unfinished_at_kill"] = unfinished
        topo.extra["aborted_rows_required"] = 1
    else:
        _kill_holding_work(topo, topo.workers[0])


def rolling_restart(topo: Topology) -> None:
    """Each stop revokes the worker's partitions while the log goes on: after recovery, others
    own them and have read past where it stopped (work in flight was handed over)."""
    source = topo.settings.topic(topics.TRANSACTIONS)
    held: list[dict[str, int | None]] = []
    _at(topo, 0.25)
    for index in (0, 1):
        held.append(source_reads(topo.workers[index], source))  # what it owned, read up to
        topo.mark_fault()
        topo.workers[index].stop()
        topo.start_worker()
        # as a rolling deployment does: the next instance goes once its replacement serves
        # (the log still flows then: 2,000/s for 10 s)
        wait_all_assigned(topo.live_workers(), source)

    def owned_now() -> dict[str, int | None]:
        """Every partition a stopped worker held, with its live owner's read offset."""
        try:
            now = {tp: read for w in topo.live_workers()
                   for tp, read in source_reads(w, source).items()}
        except OSError:  # a worker's web page not up yet
            return {}
        return now if all(tp in now for stopped in held for tp in stopped) else {}

    def handed_over() -> None:
        now = wait_until(owned_now, timeout_s=60, what="live owners of every handed-over partition")
        # what the group committed once all was in: past a stopped worker's last read by more
        # than one (its own last commit), so others read its partitions on after the stop. The
        # owners' read offsets only say so when no later rebalance reset them, hence the commit.
        committed = asyncio.run(committed_offsets(topo.settings, topo.settings.app_id, source))
        moved = [sum(1 for tp, read in stopped.items()
                     if committed.get(tp, -1) > _offset(read) + 1) for stopped in held]
        topo.extra["handed_over"] = "+".join(map(str, moved))
        assert all(moved), (f"a stopped worker's partitions were not taken over with work left "
                            f"(per stop {moved}, held {held}, committed {committed}, owners read "
                            f"{now}): the restart hit nothing in flight")

    topo.after_recovery.append(handed_over)


def _offset(read: int | None) -> int:
    return -1 if read is None else read


def kill_action_service(topo: Topology) -> None:
    _at(topo, 0.3)
    topo.mark_fault()
    assert topo.service is not None
    topo.service.kill()
    time.sleep(10)  # the fault itself: the service stays down for 10 s
    topo.start_service()


def _use_proxy(topo: Topology) -> None:
    proxy = FaultProxy(topo.settings.action_service_url, free_port())
    proxy.start()
    topo.proxy = proxy  # type: ignore[attr-defined]
    topo.settings = topo.settings.replace(action_service_url=proxy.url)


def unavailable_then_stalled(topo: Topology) -> None:
    """503s for 10 s, then requests held unanswered for 20 s: backpressure, then drain.

    The proxy must have refused and held requests, and the actions lag must peak above the
    one normal load gave before the fault (the dispatcher's 1 s commits), in the same run.
    """
    proxy: FaultProxy = topo.proxy  # type: ignore[attr-defined]
    actions = topo.settings.topic(topics.ACTIONS)
    peak = baseline = 0

    def watch(seconds: float) -> None:
        nonlocal peak
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # the fault's duration, sampling lag meanwhile
            peak = max(peak, asyncio.run(group_lag(topo.settings, topo.settings.app_id, actions)))
            time.sleep(0.5)  # poll: sampling lag during the fault

    def normal_load_until_fault() -> bool:
        nonlocal baseline
        baseline = max(baseline, asyncio.run(group_lag(topo.settings, topo.settings.app_id,
                                                       actions)))
        return topo.served() >= int(0.2 * topo.expected_served)

    wait_until(normal_load_until_fault, timeout_s=180, interval_s=0.2,
               what="20% served (the actions lag of normal load sampled meanwhile)")
    topo.mark_fault()
    proxy.set_mode("503")
    watch(10)
    proxy.set_mode("stall")
    watch(20)
    proxy.set_mode("pass")
    released = time.monotonic()
    wait_until(lambda: asyncio.run(group_lag(topo.settings, topo.settings.app_id, actions)) == 0,
               timeout_s=180, what="the actions lag to drain")
    topo.extra = {"refused_503": proxy.refused, "held": proxy.stalled,
                  "peak_actions_lag": peak, "normal_actions_lag": baseline,
                  "drain_s": round(time.monotonic() - released, 1)}
    assert proxy.refused > 0 and proxy.stalled > 0, (
        f"the proxy refused {proxy.refused} and held {proxy.stalled} requests: the dispatcher "
        f"did not go through it")
    assert peak > baseline, (f"the outage's actions lag peak {peak} is not above normal load's "
                             f"{baseline}: the dispatcher was not held back")


def restart_redis(topo: Topology) -> None:
    """The restart must fail POSTs in flight: the service answers 503 (Redis unavailable)
    and the dispatcher retries them, then every effect is applied once."""
    stack = Stack(topo.settings)
    _at(topo, 0.3)
    _actions_grew(topo)  # an action just produced: its POST is on its way as Redis stops
    topo.mark_fault()
    assert stack.redis.stop()
    assert stack.redis.start()
    stack.redis.wait_ready()

    def retried() -> None:
        unavailable = topo.service_metric("action_service_redis_unavailable_total")
        retries = topo.worker_metric("fraudstream_dispatch_retries_total")
        topo.extra.update(redis_unavailable_503=unavailable, retried_posts=retries)
        assert unavailable > 0 and retries > 0, (
            f"the Redis restart failed {unavailable} requests and the dispatcher retried "
            f"{retries}: it hit no work in flight")

    topo.after_recovery.append(retried)


def restart_kafka(topo: Topology) -> None:
    """The restart must hit a replay and a consumer group in flight: messages still to be
    produced and to be consumed when the broker stops, all of them through after it."""
    stack = Stack(topo.settings)
    source = topo.settings.topic(topics.TRANSACTIONS)
    _at(topo, 0.2)
    unconsumed = topo.lags()[topics.TRANSACTIONS]
    produced = asyncio.run(topic_sizes(topo.settings, [source]))[source]
    topo.mark_fault()
    stopping = time.monotonic()
    assert stack.kafka.stop()
    replaying = topo.replaying()  # with the broker down: it could not have finished meanwhile
    stop_s = time.monotonic() - stopping
    assert stack.kafka.start()
    stack.kafka.wait_ready()
    topo.extra = {"replay_running_at_stop": replaying,
                  "produced_at_stop": f"{produced}/{topo.total_messages}",
                  "unconsumed_at_stop": unconsumed, "broker_stop_s": round(stop_s, 1)}
    assert replaying and produced < topo.total_messages and unconsumed > 0, (
        f"the broker stopped with the replay {'running' if replaying else 'over'}, "
        f"{produced}/{topo.total_messages} produced, {unconsumed} unconsumed: nothing in flight")


def kill_busiest_kafka_leader(topo: Topology) -> None:
    """Cluster profile: SIGKILL the broker leading the busiest partitions mid-stream.

    Its partitions' leadership moves to in-sync replicas (RF 3, min.insync 2, acks=all, no
    unclean election), the pipeline goes on on two brokers; the broker is started again
    after 60 % of the log and must rejoin every ISR before the checks.
    """
    stack = Stack(topo.settings)
    assert isinstance(stack.kafka, KafkaCluster), "needs the cluster profile's Kafka"
    names = [topo.settings.topic(t) for t in topics.PIPELINE_TOPICS]
    _at(topo, 0.3)
    load, parts = leader_load(topo.settings, names)
    victim = max(load, key=lambda broker: load[broker])
    led = [p for p in parts if p.leader == victim]
    assert all(len(p.isr) == 3 for p in parts), f"replicas out of sync before the kill: {parts}"
    node = stack.kafka.node(victim)
    pid = node.process.pid()
    assert pid is not None, f"broker {victim} is not ours to kill"
    topo.mark_fault()
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)

    def moved() -> bool:
        try:
            now = partitions(topo.settings, names)
        except KafkaError:
            return False
        return all(p.leader not in (victim, -1) for p in now)

    wait_until(moved, timeout_s=60, interval_s=0.2, what=f"leadership to move off broker {victim}")
    moved_s = time.monotonic() - killed_at
    _at(topo, 0.6)
    assert node.start()
    node.wait_ready(timeout_s=90)
    wait_until(lambda: all(len(p.isr) == 3 for p in partitions(topo.settings, names)),
               timeout_s=120, interval_s=0.5, what=f"broker {victim} back in every ISR")
    topo.extra = {"killed_broker": victim, "partitions_led": len(led),
                  "messages_led": load[victim], "leaders_moved_s": round(moved_s, 1),
                  "degraded_s": round(time.monotonic() - killed_at, 1)}


def kill_busiest_redis_master(topo: Topology) -> None:
    """Cluster profile: SIGKILL the Redis master holding the most ledger entries mid-stream.

    Its replica is promoted (cluster-node-timeout), and meanwhile the action service answers
    its shards' actions 503, which the worker's deliverer retries. Every 201 waited for a
    replica (WAIT), so no acknowledged effect goes with the dead master. The node is started
    again at 60 % and must rejoin as a replica of its promoted one before the checks.
    """
    stack = Stack(topo.settings)
    cluster = stack.redis
    assert isinstance(cluster, RedisCluster), "needs the cluster profile's Redis Cluster"
    _at(topo, 0.3)
    load: Counter[int] = Counter()  # master port -> ledger entries it holds so far
    for stream in EFFECTS_STREAMS:
        master = cluster.master_for_key(stream)
        with redis.Redis(host="127.0.0.1", port=master.port, socket_timeout=5) as client:
            load[master.port] += int(client.xlen(stream))
    victim = max(load, key=lambda port: load[port])
    master = next(n for n in cluster.node_list() if n.port == victim)
    assert cluster.replicas_of(master), f"master {victim} has no live replica to promote"
    node = cluster.node(victim)
    pid = node.process.pid()
    assert pid is not None, f"redis node {victim} is not ours to kill"
    topo.mark_fault()
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    cluster.wait_ok(timeout_s=60, exclude=[victim])  # a replica serves its slots now
    promoted_s = time.monotonic() - killed_at
    _at(topo, 0.6)
    assert node.start()
    cluster.wait_ok(timeout_s=90)  # back, as a replica in sync with its promoted master
    rejoined = next(n for n in cluster.node_list() if n.port == victim)
    assert rejoined.role == "replica", f"redis node {victim} came back as {rejoined.role}"
    topo.extra = {"killed_master": victim, "ledger_entries_held": load[victim],
                  "replica_promoted_s": round(promoted_s, 1),
                  "degraded_s": round(time.monotonic() - killed_at, 1)}


def reread_under_new_group(topo: Topology) -> None:
    """After a clean run, new workers in a new group (and changelog) re-read from offset 0."""
    topo.join_replay()
    topo.wait_recovered(topo.expected_keys, topo.total_messages)
    before = topo.replays_absorbed()
    fresh = topo.settings.replace(app_id=f"{topo.settings.app_id}-again")
    topo.mark_fault()
    for _ in range(2):
        topo.start_worker(fresh)
    wait_until(lambda: sum(asyncio.run(group_lag(fresh, fresh.app_id, fresh.topic(t)))
                           for t in (topics.TRANSACTIONS, topics.ACTIONS)) == 0
               and topo.replays_absorbed() - before >= len(topo.expected_keys),
               timeout_s=240, interval_s=1.0, what="the new group to re-read everything")
    topo.extra = {"replays_by_new_group": topo.replays_absorbed() - before}


def no_fault(topo: Topology) -> None:
    topo.mark_fault()


ROLLOUT_VERSION = "mlp-rollout-b"


def _rollout_models(topo: Topology) -> None:
    """A second version with other weights (its scores and some decisions differ)."""
    target = topo.tmp / "models"
    base = add_shifted_version(topo.settings.model_dir, target, ROLLOUT_VERSION)
    topo.settings = topo.settings.replace(model_dir=target)
    topo.rollout = Rollout(base, ROLLOUT_VERSION)  # Topology.check: rows against versions


def rollout_mid_stream(topo: Topology) -> None:
    _at(topo, 0.4)
    topo.mark_fault()
    assert topo.rollout is not None
    topo.rollout.mark_published(topo.settings)
    asyncio.run(publish_activation(topo.settings, ROLLOUT_VERSION))


SCENARIOS: dict[str, Scenario] = {
    "worker-kill-5x": Scenario(kill_worker_five_times, {"txns": 50_000, "rate": 5_000.0},
                               kills=True, about="SIGKILL a worker five times while 50k "
                               "transactions stream in at 5k/s"),
    "worker-dies": Scenario(kill_worker_for_good, kills=True,
                            about="SIGKILL one of two workers for good: the other takes over"),
    # the same on the memory card store (every other scenario runs on the default, RocksDB)
    "worker-dies-memory": Scenario(kill_worker_for_good, {"store": "memory"}, kills=True,
                                   about="worker-dies with the memory card store"),
    # 1,000/s: the log (~20 s) still flows at the third kill, in exactly_once too (whose kills
    # wait for the victim's own open transaction). A restart on its own directory rejoins at
    # once (it removes its predecessor from the group), so at 3,000/s the log could be read and
    # committed whole before the third kill found acked work to interrupt
    "worker-kill-in-place": Scenario(kill_worker_restart_in_place, {"rate": 1_000.0},
                                     kills=True, about="SIGKILL a worker three times, each "
                                     "restarted on its own local card store (tail restore)"),
    # SIGTERM: a clean handover may re-read nothing, but hands over partitions with work left
    # 2,000/s: the log still flows at the second stop, after the first replacement has joined
    "rolling-restart": Scenario(rolling_restart, {"rate": 2_000.0},
                                about="SIGTERM and restart each worker in turn, the next once its "
                                      "replacement serves (clean hand-over)"),
    "service-kill": Scenario(kill_action_service, kills=True,
                             about="SIGKILL the action service for 10 s: dispatch retries"),
    "service-503-stall": Scenario(unavailable_then_stalled, prepare=_use_proxy,
                                  about="the action service answers 503, then stalls 20 s "
                                  "(a fault proxy)"),
    "redis-restart": Scenario(restart_redis, needs_local="redis",
                              about="restart the local Redis (AOF) mid-stream"),
    # 2k/s: the replay still runs when the broker is down (a SIGTERM'd broker takes 2-3 s)
    "kafka-restart": Scenario(restart_kafka, {"rate": 2_000.0}, needs_local="kafka",
                              about="restart the local Kafka broker mid-stream"),
    "kafka-leader-kill": Scenario(kill_busiest_kafka_leader, needs_cluster=True,
                                  about="cluster profile: SIGKILL the Kafka broker leading the "
                                  "busiest partitions mid-stream; restart it at 60 %"),
    "redis-master-kill": Scenario(kill_busiest_redis_master, needs_cluster=True,
                                  about="cluster profile: SIGKILL the Redis master holding the "
                                  "most ledger entries mid-stream; restart it at 60 %"),
    "reread-new-group": Scenario(reread_under_new_group, {"txns": 10_000},
                                 about="re-read the whole log under a new consumer group: "
                                 "no effect twice"),
    "poison": Scenario(no_fault, {"malformed": 0.05},
                       about="5% malformed messages: all dead-lettered, none stops the agent"),
    "rollout": Scenario(rollout_mid_stream, prepare=_rollout_models,
                        about="activate another model version mid-stream, no restart"),
    "upstream-redelivery": Scenario(no_fault, {"redelivery": 0.05},
                                    about="5% of transactions delivered twice by the producer"),
}

#: The scenarios that also run with FRAUDSTREAM_PROCESSING=exactly_once (the README names them):
#: a worker SIGKILLed for good (open transactions aborted by the new owner), one SIGKILLed in
#: open transactions and restarted on its own card store (the store holds nothing they wrote),
#: a clean hand-over (revocation commits, the next owner fences), the dispatcher retrying
#: through a dead action service over a transactional actions topic, and dead letters inside
#: the transactions. The
#: others would add their full time again to a CI run that must stay under 30 minutes.
EXACTLY_ONCE_SCENARIOS = ("worker-dies", "worker-kill-in-place", "rolling-restart",
                          "service-kill", "poison")
