"""Redis databases for tests: one URL per database index, flushed only there.

A Redis Cluster has database 0 only: there the URL stays as it is and a flush empties the
cluster (every master), which is what a cluster run of the suite owns alone.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from app.redis_url import is_cluster_url, sync_client


def with_db(url: str, db: int) -> str:
    """The same Redis URL pointed at database index `db` (a cluster URL: unchanged)."""
    if is_cluster_url(url):
        return url
    parts = urlsplit(url)
    query = "&".join(q for q in parts.query.split("&") if q and not q.startswith("db="))
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", query, parts.fragment))


def flush_db(url: str) -> None:
    """FLUSHDB on exactly the database `url` names (never FLUSHALL); on a cluster, every master."""
    import redis.cluster

    client = sync_client(url)
    try:
        if isinstance(client, redis.cluster.RedisCluster):
            client.flushdb(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        else:
            client.flushdb()
    finally:
        client.close()
