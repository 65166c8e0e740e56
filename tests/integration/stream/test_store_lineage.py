"""A worker started on a data directory whose card store mirrors another app id, or topics since
deleted and created again, or a changelog partition that lost its records, discards what it cannot
trust and rebuilds it from its own changelog: it starts (no ConsistencyError), and what it serves
counts only the events of its own topics."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from app.harness.pipeline import (
    audit_served,
    drop_quietly,
    lines_of,
    make_log,
    replay,
    wait_drained,
)
from app.harness.procs import Spawned, spawn_worker, wait_all_assigned, wait_until
from app.kafka import topics
from app.kafka.inspect import topic_sizes
from app.kafka.topics import drop_topics, ensure_topics
from app.settings import Settings, load_settings
from app.stack.kafka import KafkaNode
from app.stack.process import free_port
from app.stream.app import worker_datadir
from app.stream.state.carddb import CardDBOptions, held_offsets, open_db

pytestmark = pytest.mark.integration


def _store_offsets(settings: Settings, tmp: Path, port: int) -> dict[int, int]:
    """The changelog offsets the stopped worker's card store holds, per partition."""
    datadir = worker_datadir(settings.replace(state_dir=tmp / "state"), port)
    (path,) = datadir.glob("**/card_state.cards.rocksdb")
    db = open_db(path, CardDBOptions())
    try:
        return held_offsets(db)
    finally:
        db.close()


def _changelog_ends(settings: Settings) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from app.security.kafka import kafka_client_kwargs

    async def ends() -> dict[int, int]:
        topic = f"{settings.app_id}-card_state-changelog"
        consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings))
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(settings.topic_partitions)]
            return {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
        finally:
            await consumer.stop()

    return asyncio.run(ends())


def _cards(lines: list[bytes]) -> set[str]:
    cards = set()
    for line in lines:
        try:
            cards.add(orjson.loads(line)["card_id"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue  # a malformed line of the generated log
    return cards


def _run(settings: Settings, tmp: Path, name: str, lines: list[bytes], *, port: int | None = None,
         before: int = 0, rate: float | None = None) -> tuple[Spawned, int]:
    """A worker on `port` (None: a new one) that serves `lines` (after `before` messages of
    the source topic), then is stopped cleanly; returns it and the messages sent."""
    worker = spawn_worker(settings, tmp, name=name, dispatch=False, port=port)
    try:
        if rate is not None:  # read as it comes, not as a backlog found on joining
            wait_all_assigned([worker], settings.topic(topics.TRANSACTIONS))
        sent = replay(settings, lines, rate=rate)
        wait_drained(settings, [worker], expected=before + sent, timeout_s=240)
    finally:
        worker.stop()
    return worker, sent


def test_a_worker_restarted_under_another_app_id_rebuilds_its_store(
        fresh_settings: Settings, stack_settings: Settings, tmp_path: Path) -> None:
    """Alpha's worker stopped, beta's (another app id) started on the same web port and state dir."""
    alpha = fresh_settings
    tag = uuid.uuid4().hex[:8]
    beta = stack_settings.replace(topic_prefix=f"t{tag}.", app_id=f"fs-test-{tag}")
    asyncio.run(ensure_topics(beta))
    lines = lines_of(make_log(cards=150, txns=3000, seed=53))
    try:
        alpha_lines = lines_of(make_log(cards=150, txns=1500, seed=52))
        first, sent = _run(alpha, tmp_path, "alpha", alpha_lines[:1000])
        held = _store_offsets(alpha, tmp_path, first.port)
        assert held, "alpha's store holds nothing"
        # a plain restart (same app id, same topics) keeps its store: only its tail is read
        again, _ = _run(alpha, tmp_path, "alpha-again", alpha_lines[1000:], port=first.port,
                        before=sent)
        assert "discarded" not in again.log_path.read_text(), again.log_tail()
        second, _ = _run(beta, tmp_path, "beta", lines, port=first.port)
        report = audit_served(beta, lines)
        assert report.ok, report.render()
        assert report.compared > 2500 and report.mismatched_rows == 0
        said = (f"card store discarded: it mirrors app id {alpha.app_id!r}, this worker is "
                f"{beta.app_id!r}; restoring it from {beta.app_id}-card_state-changelog")
        assert said in second.log_path.read_text(), second.log_tail()
    finally:
        drop_quietly(beta)


def _recreate(settings: Settings) -> None:
    """Delete the app's topics (its changelog too) and create the pipeline's again."""
    asyncio.run(drop_topics(settings))

    def created() -> bool:
        try:
            asyncio.run(ensure_topics(settings))
        except Exception:  # noqa: BLE001 - topics still being deleted: try again
            return False
        source = settings.topic(topics.TRANSACTIONS)
        return asyncio.run(topic_sizes(settings, [source]))[source] == 0

    wait_until(created, timeout_s=60, interval_s=0.5, what="the topics to be created again")


def test_a_worker_restarted_after_its_topics_were_recreated_serves_no_stale_state(
        fresh_settings: Settings, tmp_path: Path) -> None:
    """The topics deleted and created again (same app id), another worker serving on them
    meanwhile (the changelog grows past the offsets the old store holds, so only its topic id
    tells it apart), then the first worker restarted on its data directory."""
    settings = fresh_settings
    old = lines_of(make_log(cards=120, txns=600, seed=54))
    lines = lines_of(make_log(cards=120, txns=3000, seed=55))
    half = len(lines) // 2
    first, _ = _run(settings, tmp_path, "first", old)
    held = _store_offsets(settings, tmp_path, first.port)
    assert held, "the first worker's store holds nothing"
    _recreate(settings)
    # paced, read as it comes: a snapshot every 100 ms, many changelog records per card, so
    # the new changelog ends past the offsets the first worker's store holds (which read its
    # log as one backlog)
    _, sent = _run(settings, tmp_path, "meanwhile", lines[:half], rate=500.0)
    ends = _changelog_ends(settings)
    assert all(ends.get(p, 0) > offset for p, offset in held.items()), (held, ends)
    again, _ = _run(settings, tmp_path, "again", lines[half:], port=first.port, before=sent)
    report = audit_served(settings, lines)
    assert report.ok, report.render()
    # the restarted worker served cards the old topics had (stale state would show), and the
    # audit found every served value counting the new topics' events only
    assert _cards(old) & _cards(lines[half:])
    assert report.compared > 2500 and report.mismatched_rows == 0
    text = again.log_path.read_text()
    assert f"{settings.app_id}-card_state-changelog was deleted and created again" in text, (
        again.log_tail())
    assert "ConsistencyError" not in text


def test_a_worker_restarted_on_a_corrupt_sst_file_rebuilds_from_the_changelog(
        fresh_settings: Settings, tmp_path: Path) -> None:
    """A block of the stopped worker's store overwritten (a disk's bit rot): the restart reads
    the store through once at open, finds it, and restores from the changelog; every value it
    serves afterwards is exact."""
    settings = fresh_settings
    lines = lines_of(make_log(cards=400, txns=6000, seed=56))
    half = len(lines) // 2
    first, sent = _run(settings, tmp_path, "first", lines[:half])
    datadir = worker_datadir(settings.replace(state_dir=tmp_path / "state"), first.port)
    (path,) = datadir.glob("**/card_state.cards.rocksdb")
    db = open_db(path, CardDBOptions())
    db.flush()  # the stopped worker's memtable into an SST file, as a long run leaves it
    db.close()
    sst = max(path.glob("*.sst"), key=lambda f: f.stat().st_size)
    with sst.open("r+b") as f:
        f.seek(sst.stat().st_size // 3)
        f.write(b"\xff" * 4096)
    again, _ = _run(settings, tmp_path, "again", lines[half:], port=first.port, before=sent)
    report = audit_served(settings, lines)
    assert report.ok, report.render()
    assert report.compared > 5000 and report.mismatched_rows == 0
    text = again.log_path.read_text()
    assert "unusable" in text and "Corruption" in text, again.log_tail()
    assert [p for p in path.parent.iterdir() if p.name.startswith(path.name + ".unusable-")]


@pytest.fixture
def own_broker(stack_settings: Settings, tmp_path: Path) -> Iterator[tuple[Settings, KafkaNode]]:
    """A single KRaft broker of this test's own (its own ports and data, under tmp_path), and
    settings on fresh topics there (Redis stays the stack's): its disk is the test's to damage."""
    node_settings = load_settings({}, state_dir=tmp_path / "broker", kafka_port=free_port(),
                                  kafka_controller_port=free_port())
    node = KafkaNode(node_settings)
    node.ensure_jars()
    node.start()
    try:
        node.wait_ready(timeout_s=90)
        tag = uuid.uuid4().hex[:8]
        settings = stack_settings.replace(kafka_bootstrap=node.address, topic_prefix=f"t{tag}.",
                                          app_id=f"fs-test-{tag}")
        asyncio.run(ensure_topics(settings))
        yield settings, node
    finally:
        node.stop()


def _rewind(settings: Settings, partition: int) -> None:
    """Commit offset 0 of the transactions topic's `partition` for the app's (empty) group:
    that partition is read again from its first event."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    from app.security.kafka import kafka_client_kwargs

    async def commit() -> None:
        tp = TopicPartition(settings.topic(topics.TRANSACTIONS), partition)
        consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings), group_id=settings.app_id,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.commit({tp: OffsetAndMetadata(0, "")})
        finally:
            await consumer.stop()

    asyncio.run(commit())


def test_a_worker_restarted_on_a_changelog_partition_that_lost_its_records_rebuilds_it(
        own_broker: tuple[Settings, KafkaNode], tmp_path: Path) -> None:
    """The broker stopped and one changelog partition's log directory removed (a disk
    replaced): it comes back empty under the same topic id, below the offsets the stopped
    worker's store holds for it. The restarted worker discards that partition only (Faust
    would raise ConsistencyError), keeps the others, and once the lost partition's events are
    read again (its source rewound, the operator's part) every value it serves is exact."""
    settings, node = own_broker
    lines = lines_of(make_log(cards=150, txns=3000, seed=57))
    half = len(lines) // 2
    first, sent = _run(settings, tmp_path, "first", lines[:half])
    held = _store_offsets(settings, tmp_path, first.port)
    lost = 0
    assert held.get(lost, -1) > 0 and len(held) == settings.topic_partitions, held
    changelog = f"{settings.app_id}-card_state-changelog"
    node.stop()
    shutil.rmtree(node.home / "data" / f"{changelog}-{lost}")
    node.start()
    node.wait_ready(timeout_s=90)
    ends = _changelog_ends(settings)
    assert ends[lost] == 0 and all(ends[p] > held[p] for p in held if p != lost), (held, ends)
    _rewind(settings, lost)
    again, _ = _run(settings, tmp_path, "again", lines[half:], port=first.port, before=sent)
    text = again.log_path.read_text()
    assert "ConsistencyError" not in text, again.log_tail()
    said = (f"partition {lost} of {changelog} discarded: held up to offset {held[lost]}, the "
            f"changelog ends at 0 (truncated or recreated)")
    assert said in text, again.log_tail()
    assert "card store discarded:" not in text, again.log_tail()  # not the whole store
    kept = [p for p in held if p != lost]
    assert not [p for p in kept if f"partition {p} of {changelog} discarded" in text], (
        again.log_tail())
    report = audit_served(settings, lines)
    assert report.ok, report.render()
    assert report.compared > 3000 and report.mismatched_rows == 0
