"""Redis databases for tests: one URL per database index, flushed only there.

A Redis Cluster has database 0 only: for a cluster URL (`redis+cluster://`) `with_db` keeps
the URL and `flush_db` flushes every master of that cluster (one the tests started).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from app.redis_url import is_cluster_url, node_url


def with_db(url: str, db: int) -> str:
    """The same Redis URL pointed at database index `db` (a cluster URL as it is)."""
    if is_cluster_url(url):
        return url
    parts = urlsplit(url)
    query = "&".join(q for q in parts.query.split("&") if q and not q.startswith("db="))
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", query, parts.fragment))


def flush_db(url: str) -> None:
    """FLUSHDB on exactly the database `url` names (never FLUSHALL); on a cluster, on each
    master."""
    import redis
    import redis.cluster

    if is_cluster_url(url):
        cluster = redis.cluster.RedisCluster.from_url(node_url(url))
        try:
            cluster.flushdb(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        finally:
            cluster.close()
        return
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()
