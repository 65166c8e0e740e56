"""A card store's lineage: the app and changelog it mirrors, and what of it no longer mirrors them.

The local card store (app.stream.state.carddb) is a cache of one changelog: the data directory it
lives in is chosen by web port only (app.stream.app.worker_datadir), so a worker started there with
another app id, or after its topics were deleted and created again, would find state that its
changelog never held, and offsets past that changelog's end (Faust then raises ConsistencyError at
every start). The store records its `Lineage`; each recovery compares it with what the broker says
now (`Changelog`) before Faust does, and `judge` says what to discard and why:

- the whole store, when it records another app id, another changelog, another topic id for it
  (deleted and created again), or nothing at all while holding data (written before stores
  recorded their lineage);
- a partition, when the offset it is held up to is at or past that partition's end offset (the
  log was truncated or recreated under it), as Kafka Streams wipes a task's state when its
  checkpoint is past the changelog's end.

What is discarded is restored from the changelog like any partition held from nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Lineage:
    """What a local card store mirrors: the app id, and per changelog topic its Kafka topic id
    (None where none was learnt: a broker before Kafka 2.8, or one that did not answer)."""

    app_id: str
    changelogs: Mapping[str, str | None]

    def to_json(self) -> bytes:
        return json.dumps({"app_id": self.app_id, "changelogs": dict(self.changelogs)},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Lineage:
        """ValueError when `raw` is not a lineage `to_json` wrote."""
        try:
            obj = json.loads(raw)
            app_id, changelogs = obj["app_id"], obj["changelogs"]
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a card store lineage: {raw[:80]!r}") from exc
        if not isinstance(app_id, str) or not isinstance(changelogs, dict) or not all(
                isinstance(k, str) and (v is None or isinstance(v, str))
                for k, v in changelogs.items()):
            raise ValueError(f"not a card store lineage: {raw[:80]!r}")
        return cls(app_id, changelogs)


@dataclass(frozen=True, slots=True)
class Changelog:
    """A changelog as the broker describes it now: its topic id (None: not learnt) and, per
    partition, its end offset (the offset the next record will get; the last stable offset
    where it is read read_committed, as Faust's recovery reads it)."""

    topic: str
    topic_id: str | None
    ends: Mapping[int, int]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What of a store goes: all of it (`whole`, why), or some partitions (partition → why)."""

    whole: str | None = None
    partitions: Mapping[int, str] = field(default_factory=dict)

    @property
    def keeps_all(self) -> bool:
        return self.whole is None and not self.partitions


def judge(recorded: Lineage | None, *, holds_data: bool, app_id: str, changelog: Changelog,
          held: Mapping[int, int | None]) -> Verdict:
    """What to discard of a store that records `recorded` (None: nothing, or not readable) and
    holds `held` (partition → the last changelog offset it holds, None for none) of
    `changelog`, for a worker of `app_id`; `holds_data`: whether it holds anything at all."""
    if recorded is None:
        if holds_data:
            return Verdict(whole="it records no app id or changelog (written before card "
                                 "stores recorded them)")
        return Verdict()
    if recorded.app_id != app_id:
        return Verdict(whole=f"it mirrors app id {recorded.app_id!r}, this worker is "
                             f"{app_id!r}")
    if changelog.topic not in recorded.changelogs:
        mirrored = ", ".join(sorted(recorded.changelogs)) or "no changelog"
        return Verdict(whole=f"it mirrors {mirrored}, not {changelog.topic}")
    before = recorded.changelogs[changelog.topic]
    if before is not None and changelog.topic_id is not None and before != changelog.topic_id:
        return Verdict(whole=f"{changelog.topic} was deleted and created again (topic id "
                             f"{before}, now {changelog.topic_id})")
    ahead: dict[int, str] = {}
    for partition, offset in sorted(held.items()):
        end = changelog.ends.get(partition)
        if offset is not None and offset >= 0 and end is not None and offset >= end:
            ahead[partition] = (f"held up to offset {offset}, the changelog ends at {end} "
                                f"(truncated or recreated)")
    return Verdict(partitions=ahead)


def lineage_after(recorded: Lineage | None, verdict: Verdict, *, app_id: str,
                  changelog: Changelog) -> Lineage:
    """What the store records once `verdict` is applied: `changelog` with its id now (the one
    recorded before where none was learnt now and the store was kept)."""
    kept = recorded if recorded is not None and verdict.whole is None else None
    changelogs = dict(kept.changelogs) if kept is not None else {}
    topic_id = changelog.topic_id
    if topic_id is None and kept is not None:
        topic_id = kept.changelogs.get(changelog.topic)
    changelogs[changelog.topic] = topic_id
    return Lineage(app_id, changelogs)


@runtime_checkable
class LineageStore(Protocol):
    """A store that records its lineage and can discard partitions
    (app.stream.state.carddb.CardDB)."""

    def lineage(self) -> Lineage | None:
        """The lineage recorded (None: none, or unreadable)."""

    def record_lineage(self, lineage: Lineage) -> None:
        """Record `lineage` (durably)."""

    def holds_data(self) -> bool:
        """Whether it holds any card or offset."""

    def held_offset(self, partition: int) -> int | None:
        """The last changelog offset of `partition` it holds (None: none)."""

    def discard_partitions(self, partitions: Collection[int]) -> int:
        """Forget the cards and offsets of `partitions`; returns how many cards went."""

    def drop(self) -> None:
        """Forget everything."""


def reconcile(store: LineageStore, *, app_id: str, changelog: Changelog,
              partitions: Collection[int]) -> Verdict:
    """Judge `store` against `changelog` for the assigned `partitions`, discard what no longer
    mirrors it (each logged at WARNING with its reason), then record the lineage it mirrors."""
    recorded = store.lineage()
    verdict = judge(recorded, holds_data=store.holds_data(), app_id=app_id, changelog=changelog,
                    held={p: store.held_offset(p) for p in partitions})
    if verdict.whole is not None:
        log.warning("card store discarded: %s; restoring it from %s", verdict.whole,
                    changelog.topic)
        store.drop()
    elif verdict.partitions:
        cards = store.discard_partitions(verdict.partitions)
        for partition, why in sorted(verdict.partitions.items()):
            log.warning("card store: partition %d of %s discarded: %s; restoring it from the "
                        "changelog", partition, changelog.topic, why)
        log.warning("card store: %d cards of partitions %s discarded", cards,
                    sorted(verdict.partitions))
    after = lineage_after(recorded, verdict, app_id=app_id, changelog=changelog)
    if after != recorded:
        store.record_lineage(after)
    return verdict
