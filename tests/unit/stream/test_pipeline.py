"""The score agent's batch logic without Faust: routing, state writes, served rows."""

from __future__ import annotations

import orjson
import pytest

from app.features.declaration import FEATURE_NAMES
from app.stream import topics
from app.stream.pipeline import TransactionPipeline, served_row
from app.stream.records import H_REASON_CODE, H_SOURCE_OFFSET, SourceMessage, header_map

NOW = 1_767_225_600_000 + 86_400_000 * 30
T0 = 1_767_225_600_000


class DictStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.writes: list[tuple[str, int]] = []

    def load(self, card_id: str) -> bytes | None:
        return self.data.get(card_id)

    def save(self, card_id: str, data: bytes, source: SourceMessage) -> None:
        self.data[card_id] = data
        self.writes.append((card_id, source.offset))


def txn(i: int, card: str = "c1", ts: int | None = None, amount: int = 1000) -> bytes:
    return orjson.dumps({"txn_id": f"t{i}", "card_id": card, "ts_ms": T0 + i * 1000 if ts is None else ts,
                         "amount_minor": amount, "currency": "EUR", "merchant_id": f"m{i % 3}",
                         "mcc": 5411, "country": "FR", "channel": "pos"})


def msgs(values: list[bytes], start: int = 0) -> list[SourceMessage]:
    return [SourceMessage("transactions", 3, start + i, b"k", v) for i, v in enumerate(values)]


@pytest.fixture
def store() -> DictStore:
    return DictStore()


def pipeline(store: DictStore) -> TransactionPipeline:
    return TransactionPipeline(store, clock_ms=lambda: NOW, allowed_lateness_ms=300_000,
                               max_message_bytes=8192)


def test_bad_message_goes_to_dlq_and_good_ones_around_it_are_scored(store: DictStore) -> None:
    out = pipeline(store).process(msgs([txn(1), b"\xff\xfe", txn(2), b'{"txn_id": 1}', txn(3)]))
    assert [s.txn.txn_id for s in out.scored] == ["t1", "t2", "t3"]
    dlq = [r for r in out.records if r.topic == topics.TRANSACTIONS_DLQ]
    assert [header_map(r.headers)[H_REASON_CODE] for r in dlq] == ["invalid_utf8", "missing_field"]
    assert [header_map(r.headers)[H_SOURCE_OFFSET] for r in dlq] == ["1", "3"]
    assert dlq[0].value == b"\xff\xfe"  # original bytes kept


def test_late_event_routed_and_not_folded(store: DictStore) -> None:
    p = pipeline(store)
    p.process(msgs([txn(1, ts=T0 + 10_000_000)]))
    out = p.process(msgs([txn(2, ts=T0)], start=1))
    assert out.scored == []
    (late,) = out.records
    assert late.topic == topics.TRANSACTIONS_LATE
    assert header_map(late.headers)[H_REASON_CODE] == "late"
    assert store.writes == [("c1", 0)]  # the late event changed nothing


def test_one_state_write_per_card_per_batch(store: DictStore) -> None:
    values = [txn(i, card=f"c{i % 2}") for i in range(6)]
    pipeline(store).process(msgs(values))
    assert sorted(store.writes) == [("c0", 4), ("c1", 5)]


def test_redelivery_rescored_with_first_features_after_restart(store: DictStore) -> None:
    first = pipeline(store).process(msgs([txn(1), txn(2), txn(3)]))
    # a new pipeline over the same stored bytes is a worker restarted from the changelog
    again = pipeline(store).process(msgs([txn(2)], start=1))
    (item,) = again.scored
    assert item.redelivered
    assert item.features == first.scored[1].features


def test_served_row_names_every_feature(store: DictStore) -> None:
    out = pipeline(store).process(msgs([txn(1, amount=250)]))
    row = served_row(out.scored[0], score=0.5, model_version="v1")
    assert list(row["features"]) == list(FEATURE_NAMES)
    assert row["features"]["count_24h"] == 1 and row["features"]["sum_24h"] == 250
    assert row["partition"] == 3 and row["offset"] == 0 and row["redelivered"] is False
