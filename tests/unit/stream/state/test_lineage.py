"""What of a card store no longer mirrors its changelog (another app id, a topic deleted and
created again, offsets past the end), and that it is discarded before Faust's recovery reads it."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.types import TP

from app.kafka.topicid import format_id, topic_ids_of
from app.stream.state import cardrecord
from app.stream.state.carddb import CardDB
from app.stream.state.cardstore import card_table
from app.stream.state.lineage import Changelog, Lineage, Verdict, judge, lineage_after, reconcile
from app.stream.state.recovery import CardRecovery

TOPIC = "beta-card_state-changelog"
NOW = Changelog(TOPIC, "id-2", {0: 100, 1: 50, 2: 0})
BETA = Lineage("beta", {TOPIC: "id-2"})


def _judge(recorded: Lineage | None, held: dict[int, int | None], *, changelog: Changelog = NOW,
           holds_data: bool = True) -> Verdict:
    return judge(recorded, holds_data=holds_data, app_id="beta", changelog=changelog, held=held)


def test_a_store_that_mirrors_the_changelog_up_to_its_end_is_kept() -> None:
    assert _judge(BETA, {0: 99, 1: 10, 2: None}).keeps_all
    assert _judge(None, {}, holds_data=False).keeps_all  # new: nothing to distrust


def test_another_app_ids_store_goes_whole() -> None:
    verdict = _judge(Lineage("alpha", {"alpha-card_state-changelog": "id-1"}), {0: 5})
    assert verdict.whole == "it mirrors app id 'alpha', this worker is 'beta'"
    assert not verdict.partitions


def test_a_store_recording_nothing_but_holding_data_goes_whole() -> None:
    """Written before stores recorded their lineage: whose it is cannot be told."""
    verdict = _judge(None, {0: 3})
    assert verdict.whole is not None and "records no app id" in verdict.whole


def test_a_store_of_another_changelog_goes_whole() -> None:
    verdict = _judge(Lineage("beta", {"beta-other-changelog": "id-2"}), {0: 3})
    assert verdict.whole == f"it mirrors beta-other-changelog, not {TOPIC}"


def test_a_changelog_deleted_and_created_again_is_told_by_its_topic_id() -> None:
    """The offsets held are all below the new changelog's ends: only the id tells it apart."""
    verdict = _judge(Lineage("beta", {TOPIC: "id-1"}), {0: 10, 1: 10})
    assert verdict.whole == (f"{TOPIC} was deleted and created again (topic id id-1, "
                             f"now id-2)")


@pytest.mark.parametrize(("recorded_id", "now_id"), [(None, "id-2"), ("id-1", None)],
                         ids=["none-recorded", "none-learnt-now"])
def test_an_unknown_topic_id_leaves_the_offsets_to_judge(recorded_id: str | None,
                                                         now_id: str | None) -> None:
    verdict = _judge(Lineage("beta", {TOPIC: recorded_id}), {0: 10, 1: 50},
                     changelog=Changelog(TOPIC, now_id, NOW.ends))
    assert verdict.whole is None and list(verdict.partitions) == [1]


def test_each_partition_held_at_or_past_its_changelogs_end_goes_alone() -> None:
    verdict = _judge(BETA, {0: 100, 1: 49, 2: 0, 3: 7})
    assert verdict.whole is None
    assert verdict.partitions == {
        0: "held up to offset 100, the changelog ends at 100 (truncated or recreated)",
        2: "held up to offset 0, the changelog ends at 0 (truncated or recreated)"}
    # 1: below its end; 3: no end known (not asked of the broker) -> kept


def test_the_lineage_recorded_after_a_verdict() -> None:
    alpha = Lineage("alpha", {"alpha-card_state-changelog": "id-1"})
    whole = _judge(alpha, {0: 5})
    assert lineage_after(alpha, whole, app_id="beta", changelog=NOW) == BETA
    # no id learnt now: the one recorded stays
    unknown = Changelog(TOPIC, None, NOW.ends)
    kept = _judge(BETA, {0: 5}, changelog=unknown)
    assert lineage_after(BETA, kept, app_id="beta", changelog=unknown) == BETA


def test_a_lineage_reads_back_what_it_wrote_and_junk_is_refused() -> None:
    assert Lineage.from_json(BETA.to_json()) == BETA
    for junk in (b"", b"{}", b"[1]", b'{"app_id": 1, "changelogs": {}}',
                 b'{"app_id": "a", "changelogs": {"t": 3}}'):
        with pytest.raises(ValueError, match="not a card store lineage"):
            Lineage.from_json(junk)


def test_topic_ids_are_read_as_kafka_prints_them() -> None:
    raw = bytes(range(16))
    assert format_id(raw) == "AAECAwQFBgcICQoLDA0ODw"
    assert format_id(bytes(16)) is None
    response = type("R", (), {"topics": [(0, "a", raw, False, [], 0, {}),
                                         (3, "gone", bytes(16), False, [], 0, {})]})()
    assert topic_ids_of(response) == {"a": "AAECAwQFBgcICQoLDA0ODw", "gone": None}


# --- on a real store --------------------------------------------------------------------------


def _store(tmp_path: Path, app_id: str = "beta") -> Any:
    app = faust.App(app_id, datadir=str(tmp_path / "worker"), autodiscover=False)
    return card_table(app, 4, store="rocksdb://")


def _fill(db: CardDB) -> None:
    db.write([(b"a0", cardrecord.pack(0, 10, b"s")), (b"b0", cardrecord.pack(0, 11, b"s"))],
             {0: 11})
    db.write([(b"a1", cardrecord.pack(1, 20, b"s"))], {1: 20})
    db.write([(b"a2", cardrecord.pack(2, 30, b"s"))], {2: 30})


def test_a_partition_past_its_end_is_discarded_with_its_cards_only(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = _store(tmp_path)
    db = table.data
    _fill(db)
    db.record_lineage(BETA)
    with caplog.at_level(logging.WARNING, logger="app.stream.state.lineage"):
        verdict = reconcile(db, app_id="beta", changelog=Changelog(TOPIC, "id-2",
                                                                   {0: 12, 1: 20, 2: 31}),
                            partitions=[0, 1, 2])
    assert dict(verdict.partitions) == {1: "held up to offset 20, the changelog ends at 20 "
                                           "(truncated or recreated)"}
    assert db.get_many([b"a0", b"b0", b"a1", b"a2"]) == [
        cardrecord.pack(0, 10, b"s"), cardrecord.pack(0, 11, b"s"), None,
        cardrecord.pack(2, 30, b"s")]
    assert [db.held_offset(p) for p in range(3)] == [11, None, 30]
    assert f"card store: partition 1 of {TOPIC} discarded: held up to offset 20" in caplog.text
    assert db.lineage() == BETA
    db.close()


def test_another_app_ids_store_is_emptied_and_records_the_new_lineage(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = _store(tmp_path).data
    _fill(db)
    db.record_lineage(Lineage("alpha", {"alpha-card_state-changelog": "id-1"}))
    with caplog.at_level(logging.WARNING, logger="app.stream.state.lineage"):
        verdict = reconcile(db, app_id="beta", changelog=NOW, partitions=[0, 1])
    assert verdict.whole is not None
    assert not db.holds_data() and db.get_many([b"a0", b"a2"]) == [None, None]
    assert db.lineage() == BETA
    assert ("card store discarded: it mirrors app id 'alpha', this worker is 'beta'; "
            f"restoring it from {TOPIC}") in caplog.text
    # the next recovery finds it mirroring its changelog: nothing more is discarded
    caplog.clear()
    assert reconcile(db, app_id="beta", changelog=NOW, partitions=[0, 1]).keeps_all
    assert not caplog.text
    db.close()


# --- in Faust's recovery ----------------------------------------------------------------------


class Restorer:
    def __init__(self, topic_id: str | None) -> None:
        self.id = topic_id

    async def topic_id(self, topic: str) -> str | None:
        return self.id


class Consumer:
    """What Faust's recovery asks its consumer for while it builds offsets."""

    def __init__(self, ends: dict[int, int]) -> None:
        self.ends = ends

    async def highwaters(self, *tps: TP) -> dict[TP, int]:
        return {tp: self.ends[tp.partition] for tp in tps}

    async def earliest_offsets(self, *tps: TP) -> dict[TP, int]:
        return dict.fromkeys(tps, 0)


def _consistent(recovery: Any, highwaters: Counter[TP]) -> bool:
    """Faust's consistency check (faust.tables.recovery, `recovery_consistency_check`)."""
    return not any(recovery.active_offsets[tp] and highwaters[tp]
                   and recovery.active_offsets[tp] > highwaters[tp]
                   for tp in recovery.active_tps)


@pytest.mark.parametrize("topic_id", ["id-2", None], ids=["topic-id", "no-topic-id"])
async def test_recovery_discards_another_apps_store_before_faust_checks_its_offsets(
        tmp_path: Path, topic_id: str | None) -> None:
    """Beta's worker on alpha's data directory. Faust reads the store's offsets at assignment;
    alpha's are past beta's empty changelog (ConsistencyError), so the store goes first."""
    alpha = _store(tmp_path, "alpha").data
    _fill(alpha)
    alpha.record_lineage(Lineage("alpha", {"alpha-card_state-changelog": "id-1"}))
    alpha.close()
    table = _store(tmp_path, "beta")
    table.restorer = Restorer(topic_id)
    topic = table.changelog_topic.get_topic_name()
    app = table.app
    recovery = CardRecovery(app, app.tables)
    active, standby = TP(topic, 0), TP(topic, 2)
    recovery.add_active(table, active)
    recovery.add_standby(table, standby)
    assert recovery.active_offsets[active] == 11 and recovery.standby_offsets[standby] == 30
    consumer = Consumer({0: 0, 1: 0, 2: 0, 3: 0})
    highwaters = Counter({active: -1})  # Faust's: end offset - 1
    assert not _consistent(recovery, highwaters)  # what raised ConsistencyError
    await recovery._build_offsets(consumer, {active}, recovery.active_offsets, "active")
    assert _consistent(recovery, highwaters)
    assert recovery.active_offsets[active] == -1  # read from the changelog's start
    await recovery._build_offsets(consumer, {standby}, recovery.standby_offsets, "standby")
    assert recovery.standby_offsets[standby] == -1
    assert not table.data.holds_data()
    assert table.data.lineage() == Lineage("beta", {topic: topic_id})
    table.data.close()


async def test_recovery_resets_only_the_partition_held_past_its_end(tmp_path: Path) -> None:
    table = _store(tmp_path, "beta")
    topic = table.changelog_topic.get_topic_name()
    _fill(table.data)
    table.data.record_lineage(Lineage("beta", {topic: "id-2"}))
    table.restorer = Restorer("id-2")
    app = table.app
    recovery = CardRecovery(app, app.tables)
    tps = {TP(topic, p) for p in range(3)}
    for tp in tps:
        recovery.add_active(table, tp)
    consumer = Consumer({0: 12, 1: 20, 2: 31})  # partition 1 truncated under the store
    await recovery._build_offsets(consumer, tps, recovery.active_offsets, "active")
    assert {tp.partition: recovery.active_offsets[tp] for tp in tps} == {0: 11, 1: -1, 2: 30}
    assert table.data.get_many([b"a0", b"a1", b"a2"])[1] is None
    table.data.close()
