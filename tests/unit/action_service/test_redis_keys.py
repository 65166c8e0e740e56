"""The cluster-ready key layout: one slot per action, stable shards, evenly spread tags."""

from __future__ import annotations

import zlib

from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from app.action_service.ledger import merge_shards
from app.action_service.redis_keys import (
    ALERTS_STREAMS,
    EFFECTS_STREAMS,
    LABEL_STREAMS,
    REVIEW_STREAMS,
    REVIEWS_OPEN,
    SHARD_TAGS,
    SHARDS,
    STATS_KEYS,
    action_keys,
    card_alerts_key,
    card_history_key,
    card_key,
    claim_key,
    decision_keys,
    idem_key,
    idem_keys,
    review_close_keys,
    shard_of,
)
from app.actions.key import idempotency_key
from app.keyspace import KEY_PATTERNS, KEY_PREFIXES

CARD_IDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-",
                   min_size=1, max_size=64)


def _slot(name: str) -> int:
    return key_slot(name.encode())


@given(card_id=CARD_IDS, txn_id=CARD_IDS)
def test_every_key_of_one_action_is_in_one_slot(card_id: str, txn_id: str) -> None:
    key = idempotency_key("freeze_card", txn_id)
    keys = action_keys(key, card_id)
    assert keys == (idem_key(key, card_id), card_key(card_id), card_alerts_key(card_id),
                    EFFECTS_STREAMS[shard_of(card_id)], ALERTS_STREAMS[shard_of(card_id)],
                    STATS_KEYS[shard_of(card_id)], card_history_key(card_id))
    assert len({_slot(k) for k in keys}) == 1
    assert _slot(keys[0]) == _slot(f"{{{SHARD_TAGS[shard_of(card_id)]}}}")


@given(card_id=CARD_IDS, key=CARD_IDS)
def test_every_key_of_one_decision_is_in_its_cards_slot(card_id: str, key: str) -> None:
    keys = decision_keys(key, card_id)
    assert keys[1:3] == (card_key(card_id), card_history_key(card_id))
    assert keys[0].startswith(card_key(card_id) + ":decision:")  # covered by the card:* ACL
    assert keys[3] == EFFECTS_STREAMS[shard_of(card_id)]
    assert len({_slot(k) for k in keys}) == 1


def test_shard_is_crc32_of_the_card_and_pinned() -> None:
    # a card's shard must never move: these values are part of the stored layout
    assert [shard_of(c) for c in ("c0000001", "c0000002", "card-1", "x")] == [
        zlib.crc32(c.encode()) % 16 for c in ("c0000001", "c0000002", "card-1", "x")]
    assert shard_of("card-1") == 4 and shard_of("c0000001") == 0
    assert card_key("card-1") == "card:{fs4.61}:card-1"
    assert EFFECTS_STREAMS[0] == "effects:{fs0.11}"


def test_tags_spread_one_per_sixteenth_of_the_slots() -> None:
    assert SHARDS == len(SHARD_TAGS) == 16
    for i, tag in enumerate(SHARD_TAGS):
        assert _slot(f"{{{tag}}}") // 1024 == i
    # three masters with contiguous ranges (redis-cli --cluster create) get 5, 5 and 6 shards
    ranges = [(0, 5460), (5461, 10922), (10923, 16383)]
    owned = [sum(lo <= _slot(f"{{{t}}}") <= hi for t in SHARD_TAGS) for lo, hi in ranges]
    assert owned == [5, 5, 6]


def test_a_key_is_looked_up_in_every_shard() -> None:
    key = idempotency_key("alert_customer", "t-1")
    names = idem_keys(key)
    assert len(set(names)) == SHARDS
    assert idem_key(key, "any-card") in names
    assert sorted(_slot(n) for n in names) == sorted(_slot(f"{{{t}}}") for t in SHARD_TAGS)


def test_merge_orders_by_entry_id_then_shard() -> None:
    per_shard = [
        [("5-0", {"k": "a"}), ("7-0", {"k": "d"})],
        [("5-0", {"k": "b"}), ("6-2", {"k": "c"})],
        [],
        [(b"7-0", {"k": "e"}), (b"10-0", {"k": "f"})],
    ]
    assert [f["k"] for _, f in merge_shards(per_shard)] == ["a", "b", "c", "d", "e", "f"]


def test_the_acl_patterns_of_the_keyspace_cover_every_key_the_service_writes() -> None:
    key = idempotency_key("freeze_card", "t-1")
    written = {*action_keys(key, "c-1"), *decision_keys("k-1", "c-1"), claim_key(key),
               *review_close_keys(0, "1-0", "c-1"), *LABEL_STREAMS, *REVIEW_STREAMS,
               *REVIEWS_OPEN, *EFFECTS_STREAMS, *ALERTS_STREAMS, *STATS_KEYS}
    assert {name.split(":", 1)[0] for name in written} == set(KEY_PREFIXES)
    assert KEY_PATTERNS == tuple(f"{prefix}:*" for prefix in KEY_PREFIXES)
