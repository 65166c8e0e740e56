"""Names of the action service's Redis keys: the one place that knows the key layout.

Every key one action touches carries its card's shard tag (`{fs<i>.<n>}`), so they all hash to
one Redis Cluster slot and one Lua call can write them atomically on a cluster too:

    idem:{tag}:<idempotency_key>      hash, the key's record (expires after the key TTL)
    card:{tag}:<card_id>              hash, the card's status
    card:{tag}:<card_id>:alerts       list, the card's newest alerts
    card:{tag}:<card_id>:history      list, the card's newest status events (frozen, released,
                                      confirmed: JSON objects, oldest first)
    card:{tag}:<card_id>:decision:<k> hash, an analyst decision's idempotency record (key k,
                                      scoped to the card; expires after the key TTL)
    effects:{tag}                     stream, the shard's part of the exactly-once ledger
    alerts:{tag}                      stream, the shard's queued customer alerts
    stats:{tag}                       hash, the shard's durable counters (`replays`)
    labels:{tag}                      stream, the shard's outbox of analyst labels (forwarded
                                      to the Kafka topic `labels`, see label_outbox.py)
    reviews:{tag}                     stream, the shard's review queue (one entry per `review`
                                      action; its entry id is the review's id in the shard)
    reviews_open:{tag}                sorted set, the shard's open reviews by queued time
    review:{tag}:<entry id>           hash, how a review was closed (outcome, who, its key)

and one key in the shard of the idempotency key itself (`crc32(key) % SHARDS`):

    claim:{tag}:<idempotency_key>     string "<fingerprint> <card_id>" of the action owning it

The claim is what makes "same key, another card" a 422 although that card's record would be in
another shard, and it tells GET /v1/actions/{key} which card shard holds the record (the key
is derived from (type, txn_id) and names no card). On a single Redis the apply script checks
and writes it with the rest; on a cluster a claim call on the key's master comes first.

The prefixes (before the first `:`) are app.keyspace's, which the secure stack's ACLs grant.
The shard of a card is `crc32(card_id) % SHARDS`. Readers of "all effects" or "all alerts"
merge the shards (see ledger.py). Changing any name or the shard count moves every key: like
a key scheme bump, it needs an empty Redis.
"""

from __future__ import annotations

import zlib
from typing import Final

#: Number of ledger shards. Fixed forever: a card's shard, and therefore where its keys and
#: ledger entries live, must not move when the cluster grows. 16 spreads evenly over any
#: cluster of up to 16 masters (each shard is a slot, and a slot lives on one master), while
#: reading "all effects" or looking a key up stays a 16-command pipeline.
SHARDS: Final = 16

#: Hash tag of each shard: tag i is the first `fs<i>.<n>` (n = 0, 1, ...) whose slot lies in
#: the i-th sixteenth of the 16384 slots, so the shards spread evenly over masters that own
#: contiguous slot ranges (as `redis-cli --cluster create` assigns them). Pinned by a test.
SHARD_TAGS: Final = (
    "fs0.11", "fs1.12", "fs2.22", "fs3.21", "fs4.61", "fs5.62", "fs6.3", "fs7.0",
    "fs8.1", "fs9.2", "fs10.23", "fs11.20", "fs12.3", "fs13.0", "fs14.40", "fs15.43",
)

#: Per shard: its effects stream, alerts stream and stats hash (the keys every action of the
#: shard shares), built once.
SHARD_KEYS: Final = tuple(
    (f"effects:{{{tag}}}", f"alerts:{{{tag}}}", f"stats:{{{tag}}}") for tag in SHARD_TAGS
)
#: Every shard's effects stream, in shard order.
EFFECTS_STREAMS: Final = tuple(keys[0] for keys in SHARD_KEYS)
#: Every shard's alerts stream, in shard order.
ALERTS_STREAMS: Final = tuple(keys[1] for keys in SHARD_KEYS)
#: Every shard's counters hash; field `replays` counts redeliveries absorbed (200 replayed).
STATS_KEYS: Final = tuple(keys[2] for keys in SHARD_KEYS)
#: Every shard's outbox of analyst labels, in shard order (same tag as the shard's cards).
LABEL_STREAMS: Final = tuple(f"labels:{{{tag}}}" for tag in SHARD_TAGS)
#: Every shard's review queue and its open set, in shard order.
REVIEW_STREAMS: Final = tuple(f"reviews:{{{tag}}}" for tag in SHARD_TAGS)
REVIEWS_OPEN: Final = tuple(f"reviews_open:{{{tag}}}" for tag in SHARD_TAGS)


def shard_of(name: str) -> int:
    """The shard of a card id (or, for its claim, of an idempotency key): crc32 of its UTF-8
    bytes modulo SHARDS (stable across processes and versions, unlike Python's salted `hash`)."""
    return zlib.crc32(name.encode("utf-8")) % SHARDS


def claim_key(key: str) -> str:
    """Redis string "<fingerprint> <card_id>" of the action that owns an idempotency key, in
    the KEY's shard."""
    return f"claim:{{{SHARD_TAGS[shard_of(key)]}}}:{key}"


def idem_key(key: str, card_id: str) -> str:
    """Redis hash holding an idempotency key's record, in its card's shard."""
    return f"idem:{{{SHARD_TAGS[shard_of(card_id)]}}}:{key}"


def idem_keys(key: str) -> tuple[str, ...]:
    """The record's name in every shard (where GET /v1/actions/{key} looks)."""
    return tuple(f"idem:{{{tag}}}:{key}" for tag in SHARD_TAGS)


def card_key(card_id: str) -> str:
    """Redis hash holding a card's status (status, frozen_at_ms, reason, ...)."""
    return f"card:{{{SHARD_TAGS[shard_of(card_id)]}}}:{card_id}"


def card_alerts_key(card_id: str) -> str:
    """Redis list of a card's newest alerts (JSON objects), oldest first."""
    return f"card:{{{SHARD_TAGS[shard_of(card_id)]}}}:{card_id}:alerts"


def card_history_key(card_id: str) -> str:
    """Redis list of a card's newest status events (JSON objects), oldest first."""
    return f"card:{{{SHARD_TAGS[shard_of(card_id)]}}}:{card_id}:history"


def action_keys(key: str, card_id: str) -> tuple[str, str, str, str, str, str, str]:
    """Every key one action touches, in the apply script's order: idem, card, card alerts,
    then its shard's effects stream, alerts stream and stats hash, then the card's history
    (one slot, one tag)."""
    shard = shard_of(card_id)
    tag = SHARD_TAGS[shard]
    effects, alerts, stats = SHARD_KEYS[shard]
    return (f"idem:{{{tag}}}:{key}", f"card:{{{tag}}}:{card_id}",
            f"card:{{{tag}}}:{card_id}:alerts", effects, alerts, stats,
            f"card:{{{tag}}}:{card_id}:history")


def analyst_label_id(card_id: str, effect_id: str) -> str:
    """The `label_id` of an analyst decision's label: its ledger entry, stream and id
    (`effects:{tag}/<entry id>`, as decide.lua writes it). The entry id alone is not unique:
    two shards' streams can issue the same id in the same millisecond."""
    return f"{SHARD_KEYS[shard_of(card_id)][0]}/{effect_id}"


def review_close_keys(shard: int, entry_id: str, card_id: str) -> tuple[str, ...]:
    """Every key closing one review touches, in review_close.lua's order: the close record,
    the shard's review stream and open set, the card, its history, the shard's effects stream
    and labels outbox (one slot: the review was queued in its card's shard)."""
    tag = SHARD_TAGS[shard]
    card = f"card:{{{tag}}}:{card_id}"
    return (f"review:{{{tag}}}:{entry_id}", REVIEW_STREAMS[shard], REVIEWS_OPEN[shard], card,
            f"{card}:history", SHARD_KEYS[shard][0], LABEL_STREAMS[shard])


def decision_keys(key: str, card_id: str) -> tuple[str, str, str, str, str]:
    """Every key one analyst decision touches, in the decision script's order: its record, the
    card, the card's history, the shard's effects stream and its labels outbox (one slot)."""
    shard = shard_of(card_id)
    tag = SHARD_TAGS[shard]
    card = f"card:{{{tag}}}:{card_id}"
    return (f"{card}:decision:{key}", card, f"{card}:history", SHARD_KEYS[shard][0],
            LABEL_STREAMS[shard])
