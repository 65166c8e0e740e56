"""The score agent's batch logic without Faust: routing, state writes, served rows."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.features.declaration import FEATURE_NAMES
from app.kafka import topics
from app.kafka.records import H_REASON_CODE, H_SOURCE_OFFSET, SourceMessage, header_map
from app.stream import metrics
from app.stream.engine.pipeline import (
    BatchOutcome,
    DictCards,
    TransactionPipeline,
    served_records,
)
from app.stream.engine.served import ServedRow, decode_served, encode_served
from app.stream.state import cardrecord

NOW = 1_767_225_600_000 + 86_400_000 * 30
T0 = 1_767_225_600_000


class DictStore(DictCards):
    """Cards in a dict, with every write's (card, offset)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, int]] = []

    def save(self, card_id: str, data: bytes, partition: int) -> None:
        super().save(card_id, data, partition)
        self.writes.append((card_id, cardrecord.unpack(data).offset))


def txn(i: int, card: str = "c1", ts: int | None = None, amount: int = 1000) -> bytes:
    return orjson.dumps({"txn_id": f"t{i}", "card_id": card, "ts_ms": T0 + i * 1000 if ts is None else ts,
                         "amount_minor": amount, "currency": "EUR", "merchant_id": f"m{i % 3}",
                         "mcc": 5411, "country": "FR", "channel": "pos"})


def msgs(values: list[bytes], start: int = 0) -> list[SourceMessage]:
    return [SourceMessage("transactions", 3, start + i, b"k", v) for i, v in enumerate(values)]


@pytest.fixture
def store() -> DictStore:
    return DictStore()


class Pipeline(TransactionPipeline):
    """process + persist, as the score agent does once a batch's outputs are flushed."""

    def run(self, batch: list[SourceMessage]) -> BatchOutcome:
        out = self.process(batch)
        self.persist(out)
        return out


def pipeline(store: DictStore) -> Pipeline:
    return Pipeline(store, clock_ms=lambda: NOW, allowed_lateness_ms=300_000,
                    max_message_bytes=8192)


def test_bad_message_goes_to_dlq_and_good_ones_around_it_are_scored(store: DictStore) -> None:
    out = pipeline(store).run(msgs([txn(1), b"\xff\xfe", txn(2), b'{"txn_id": 1}', txn(3)]))
    assert [s.txn.txn_id for s in out.scored] == ["t1", "t2", "t3"]
    dlq = [r for r in out.records if r.topic == topics.TRANSACTIONS_DLQ]
    assert [header_map(r.headers)[H_REASON_CODE] for r in dlq] == ["invalid_utf8", "missing_field"]
    assert [header_map(r.headers)[H_SOURCE_OFFSET] for r in dlq] == ["1", "3"]
    assert dlq[0].value == b"\xff\xfe"  # original bytes kept


def test_late_event_routed_and_not_folded(store: DictStore) -> None:
    p = pipeline(store)
    p.run(msgs([txn(1, ts=T0 + 10_000_000)]))
    before = bytes(cardrecord.unpack(store.data["c1"]).state)
    out = p.run(msgs([txn(2, ts=T0)], start=1))
    assert out.scored == []
    (late,) = out.records
    assert late.topic == topics.TRANSACTIONS_LATE
    assert header_map(late.headers)[H_REASON_CODE] == "late"
    # the late event changed no feature state, only the card's source position
    assert bytes(cardrecord.unpack(store.data["c1"]).state) == before
    assert store.writes == [("c1", 0), ("c1", 1)]


def test_one_state_write_per_card_per_batch(store: DictStore) -> None:
    values = [txn(i, card=f"c{i % 2}") for i in range(6)]
    pipeline(store).run(msgs(values))
    assert sorted(store.writes) == [("c0", 4), ("c1", 5)]


def test_redelivery_rescored_with_first_features_after_restart(store: DictStore) -> None:
    first = pipeline(store).run(msgs([txn(1), txn(2), txn(3)]))
    # a new pipeline over the same stored bytes is a worker restarted from the changelog
    again = pipeline(store).run(msgs([txn(2)], start=1))
    (item,) = again.scored
    assert item.redelivered
    assert item.features == first.scored[1].features


def test_served_row_names_every_feature(store: DictStore) -> None:
    out = pipeline(store).run(msgs([txn(1, amount=250)]))
    (rec,) = served_records(out.scored, [0.5], "v1")
    assert (rec.topic, rec.key, rec.source_partition) == (topics.FEATURES_SERVED, b"c1", 3)
    # the record on the wire is what audit-skew reads back
    row = decode_served(rec.value)
    assert list(row.features) == list(FEATURE_NAMES)
    assert row.features["count_24h"] == 1 and row.features["sum_24h"] == 250
    assert row.partition == 3 and row.offset == 0 and row.redelivered is False
    assert (row.score, row.model_version) == (0.5, "v1")
    assert row.to_json() == rec.value
    assert orjson.loads(rec.value) == row.to_dict()
    with pytest.raises(ValueError):
        decode_served(orjson.dumps({**row.to_dict(), "extra": 1}))


_value = st.one_of(st.integers(-(2**63), 2**63 - 1),
                   st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=300, deadline=None)
@given(txn_id=st.text(max_size=12), card_id=st.text(max_size=12),
       ts_ms=st.integers(0, 2**62), offset=st.integers(0, 2**62),
       features=st.lists(_value, min_size=len(FEATURE_NAMES), max_size=len(FEATURE_NAMES)),
       score=st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
       version=st.one_of(st.none(), st.text(max_size=8)), redelivered=st.booleans())
def test_the_served_encoder_writes_what_served_row_writes(
        txn_id: str, card_id: str, ts_ms: int, offset: int, features: list[int | float],
        score: float | None, version: str | None, redelivered: bool) -> None:
    row = ServedRow(txn_id, card_id, ts_ms, 5, offset, dict(zip(FEATURE_NAMES, features,
                                                                 strict=True)),
                    score, version, redelivered)
    assert encode_served(txn_id, card_id, ts_ms, 5, offset, features, score, version,
                         redelivered) == row.to_json()


def test_a_batch_of_served_rows_is_each_row_as_the_row_encoder_writes_it(
        store: DictStore) -> None:
    """One buffer for the batch, cut apart: the same records, in order, whatever the lengths."""
    out = pipeline(store).run(msgs([txn(1, amount=250), txn(2, amount=12_345_678),
                                    txn(3, card="c-with-a-longer-id"), txn(2)]))
    scores = [0.5, None, 1e-300, 0.25]
    batch = served_records(out.scored, scores, "v1")
    assert [r.value for r in batch] == [
        encode_served(i.txn.txn_id, i.txn.card_id, i.txn.ts_ms, i.source.partition,
                      i.source.offset, i.features, score, "v1", i.redelivered, i.label_cut_ms)
        for i, score in zip(out.scored, scores, strict=True)]
    assert [(r.topic, r.key, r.source_partition) for r in batch] == [
        (topics.FEATURES_SERVED, i.txn.card_id.encode(), i.source.partition) for i in out.scored]
    assert len({len(r.value) for r in batch}) > 1
    assert served_records([], [], "v1") == []
    with pytest.raises(ValueError):
        served_records(out.scored, scores[:-1], "v1")


def test_the_served_encoder_refuses_a_vector_of_another_width() -> None:
    for width in (len(FEATURE_NAMES) - 1, len(FEATURE_NAMES) + 1):
        with pytest.raises(TypeError):
            encode_served("t", "c", 0, 0, 0, [0] * width, None, None, False)


def test_nothing_is_saved_until_persist(store: DictStore) -> None:
    out = pipeline(store).process(msgs([txn(1), txn(2, card="c2")]))
    assert store.writes == []  # state waits for the outputs to be flushed
    assert [(card, part, cardrecord.unpack(rec).offset) for card, (part, rec) in out.saves.items()
            ] == [("c1", 3, 0), ("c2", 3, 1)]


def test_a_batch_without_a_snapshot_leaves_its_cards_to_the_next_one(store: DictStore) -> None:
    p = pipeline(store)
    first = p.process(msgs([txn(1), txn(2, card="c2")]), snapshot=False)
    assert first.saves == {}
    second = p.process(msgs([txn(3), txn(4, card="c3")], start=2))
    # every card changed since the last snapshot, once, as of its newest message
    assert {card: cardrecord.unpack(rec).offset for card, (_, rec) in second.saves.items()
            } == {"c1": 2, "c2": 1, "c3": 3}
    assert p.process(msgs([txn(5, card="c2")], start=4)).saves.keys() == {"c2"}
    p.process(msgs([txn(6)], start=5), snapshot=False)
    assert p.snapshot().keys() == {"c1"} and p.snapshot() == {}


def test_states_are_kept_between_batches_until_forget(store: DictStore) -> None:
    p = pipeline(store)
    p.process(msgs([txn(1)]))  # never persisted: the next batch still sees it
    out = p.process(msgs([txn(2)], start=1))
    assert out.scored[0].features[FEATURE_NAMES.index("count_24h")] == 2
    p.forget()  # partitions moved: what is not stored is gone
    out = p.process(msgs([txn(3)], start=2))
    assert out.scored[0].features[FEATURE_NAMES.index("count_24h")] == 1


def test_saved_record_carries_the_last_source_position(store: DictStore) -> None:
    pipeline(store).run(msgs([txn(1), txn(2), txn(3, card="c2")], start=40))
    rec = cardrecord.unpack(store.data["c1"])
    assert (rec.partition, rec.offset) == (3, 41)


def test_reread_after_its_event_left_the_window_is_skipped_not_late(store: DictStore) -> None:
    """A crash re-reads a message the state holds but no longer remembers (evicted since):
    without the source-position fence it would be routed late or folded in a second time."""
    day = 86_400_000  # t1 and t2 31 days apart: beyond the longest window (30 days) + lateness
    first, later = T0 - 5 * day, T0 + 26 * day
    p = pipeline(store)
    p.run(msgs([txn(1, ts=first), txn(2, ts=later)]))
    again = p.run(msgs([txn(1, ts=first), txn(2, ts=later)]))  # offsets 0 and 1 again
    assert again.records == [] and again.skipped == 1  # t1: evicted, nothing re-emitted
    (item,) = again.scored  # t2: still remembered, served again with its first features
    assert item.redelivered and item.txn.txn_id == "t2"
    fresh = p.run(msgs([txn(3, ts=later + 1)], start=2))
    assert fresh.scored[0].features[FEATURE_NAMES.index("count_24h")] == 2
    assert fresh.scored[0].features[FEATURE_NAMES.index("count_30d")] == 2


def test_late_messages_move_the_position_so_a_reread_is_not_routed_twice(store: DictStore) -> None:
    p = pipeline(store)
    p.run(msgs([txn(1, ts=T0 + 10_000_000), txn(2, ts=T0)]))
    assert cardrecord.unpack(store.data["c1"]).offset == 1
    again = p.run(msgs([txn(2, ts=T0)], start=1))
    assert again.records == [] and again.skipped == 1


def test_another_partition_is_not_fenced(store: DictStore) -> None:
    p = pipeline(store)
    p.run(msgs([txn(1), txn(2)], start=10))
    other = [SourceMessage("transactions", 0, 0, b"k", txn(3))]
    out = p.run(other)
    assert [s.redelivered for s in out.scored] == [False]


def test_a_bounded_card_cache_serves_the_same_features_as_an_unbounded_one() -> None:
    """Cards let go from the decoded cache are read back from the store (or from a snapshot
    staged on its way there): the features served are those of an unbounded cache."""
    values = [txn(i, card=f"c{(i * 7) % 11}") for i in range(120)]
    batches = [msgs(values[i:i + 9], start=i) for i in range(0, len(values), 9)]

    def served(max_cached: int, snapshot_every: int) -> list[tuple[str, tuple[int | float, ...]]]:
        store = DictStore()
        pipe = TransactionPipeline(store, clock_ms=lambda: NOW, allowed_lateness_ms=300_000,
                                   max_message_bytes=8192, max_cached_cards=max_cached)
        staged: dict[str, tuple[int, bytes]] = {}
        out = []
        for n, batch in enumerate(batches):
            result = pipe.process(batch, snapshot=n % snapshot_every == 0)
            out += [(s.txn.txn_id, s.features) for s in result.scored]
            # a snapshot reaches the store one batch later (it waits for the outputs)
            for card_id, (part, record) in staged.items():
                store.save(card_id, record, part)
            staged = result.saves
            assert max_cached == 0 or pipe.cached_cards <= max_cached + len(pipe._changed)
            store.load = lambda card_id, _s=store, _st=staged: (  # type: ignore[method-assign]
                _st[card_id][1] if card_id in _st else _s.data.get(card_id))
        return out

    unbounded = served(0, 1)
    assert len(unbounded) == 120
    for snapshot_every in (1, 3):
        assert served(2, snapshot_every) == unbounded
        assert served(5, snapshot_every) == unbounded


def test_the_cached_cards_gauge_follows_the_cache_below_its_bound_and_after_a_rebalance() -> None:
    """fraudstream_cards_cached is what the worker holds (what its memory grows with), not only
    what it was last trimmed to."""
    gauge = metrics.CARDS_CACHED
    pipe = TransactionPipeline(DictStore(), clock_ms=lambda: NOW, allowed_lateness_ms=300_000,
                               max_message_bytes=8192, max_cached_cards=4)
    pipe.process(msgs([txn(i, card=f"c{i}") for i in range(3)]))
    assert gauge._value.get() == 3
    pipe.process(msgs([txn(i, card=f"c{i}") for i in range(3, 9)], start=3))
    assert gauge._value.get() == pipe.cached_cards == 4  # trimmed after the snapshot
    pipe.forget()
    assert gauge._value.get() == 0


def test_cached_events_counts_what_the_decoded_windows_hold(store: DictStore) -> None:
    p = pipeline(store)
    p.run(msgs([txn(1), txn(2), txn(3, card="c2")]))
    assert p.cached_events == 3
    p.forget()
    assert p.cached_events == 0
