"""Reading the sharded ledgers as one: every effect (or alert) of every shard, merged in order.

Each shard's stream is ordered by its entry ids (`<ms>-<seq>`, from the server's clock). The
merge orders all entries by (ms, seq, shard): exact within a card (one card, one shard, one
stream) and by time across cards; entries of different shards in the same millisecond follow
shard order. Works on a single Redis and on a cluster, blocking or asyncio clients alike (the
pipeline sends one XRANGE per shard, grouped per node on a cluster).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

from app.action_service.redis_keys import ALERTS_STREAMS, EFFECTS_STREAMS, STATS_KEYS

#: One stream entry as redis-py returns it: (entry id, fields).
Entry: TypeAlias = tuple[Any, dict[Any, Any]]


def _order(entry_id: str | bytes) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def merge_shards(per_shard: Sequence[Iterable[Entry]]) -> list[Entry]:
    """The entries of every shard's stream (each in id order) as one list in (ms, seq, shard)
    order."""
    runs = [[((*_order(e[0]), shard), e) for e in entries]
            for shard, entries in enumerate(per_shard)]
    return [entry for _, entry in heapq.merge(*runs, key=lambda item: item[0])]


def _xrange_all(client: Any, streams: Sequence[str]) -> Any:
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xrange(stream)
    return pipe


def read_effects(client: Any) -> list[Entry]:
    """Every effect applied (the exactly-once ledger), merged over the shards (blocking client:
    `redis.Redis` or `redis.cluster.RedisCluster`)."""
    return merge_shards(_xrange_all(client, EFFECTS_STREAMS).execute())


def read_alerts(client: Any) -> list[Entry]:
    """Every alert queued, merged over the shards (blocking client)."""
    return merge_shards(_xrange_all(client, ALERTS_STREAMS).execute())


async def read_effects_async(client: Any) -> list[Entry]:
    """`read_effects` for an asyncio client (`redis.asyncio.Redis` or `RedisCluster`)."""
    return merge_shards(await _xrange_all(client, EFFECTS_STREAMS).execute())


async def read_alerts_async(client: Any) -> list[Entry]:
    """`read_alerts` for an asyncio client."""
    return merge_shards(await _xrange_all(client, ALERTS_STREAMS).execute())


def _xlen_all(client: Any, streams: Sequence[str]) -> Any:
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xlen(stream)
    return pipe


def count_effects(client: Any) -> int:
    """How many effects the ledger holds (sum of the shards' lengths; blocking client)."""
    return sum(_xlen_all(client, EFFECTS_STREAMS).execute())


async def count_effects_async(client: Any) -> int:
    """`count_effects` for an asyncio client."""
    return sum(await _xlen_all(client, EFFECTS_STREAMS).execute())


async def count_alerts_async(client: Any) -> int:
    """How many alerts are queued (sum of the shards' lengths; asyncio client)."""
    return sum(await _xlen_all(client, ALERTS_STREAMS).execute())


def count_replays(client: Any) -> int:
    """Redeliveries absorbed (answered 200 replayed), summed over the shards' stats hashes
    (blocking client)."""
    pipe = client.pipeline(transaction=False)
    for key in STATS_KEYS:
        pipe.hget(key, "replays")
    return sum(int(value or 0) for value in pipe.execute())
