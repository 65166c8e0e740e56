"""Redis URL forms: a single node (`redis://`, `rediss://`) or a cluster seed (`redis+cluster://`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import redis
    import redis.cluster

#: Schemes naming a Redis Cluster seed node (plain and TLS). Any node of the cluster will do:
#: the client reads the slot map from it and connects to every master it names.
CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    """True when `url` names a Redis Cluster seed (`redis+cluster://` or `rediss+cluster://`)."""
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def cluster_url(host: str, port: int, *, tls: bool = False) -> str:
    """The seed URL of the cluster node at host:port, as REDIS_URL takes it."""
    return f"{'rediss' if tls else 'redis'}+cluster://{host}:{port}"


def node_url(url: str) -> str:
    """The plain `redis://` (`rediss://`) form of `url`, for redis-py's `from_url` of a node or
    of `RedisCluster` (a cluster has one database, so a path such as /0 is dropped there)."""
    parts = urlsplit(url)
    plain = CLUSTER_SCHEMES.get(parts.scheme)
    if plain is None:
        return url
    return urlunsplit((plain, parts.netloc, "", parts.query, parts.fragment))


def sync_client(url: str, **kwargs: Any) -> redis.Redis | redis.cluster.RedisCluster:
    """A blocking redis-py client of `url`: a `RedisCluster` for a cluster seed, else `Redis`
    (tests, the demo's checks and the ledger readers; the service builds its own async one)."""
    import redis.cluster

    if is_cluster_url(url):
        return redis.cluster.RedisCluster.from_url(node_url(url), **kwargs)
    return redis.Redis.from_url(url, **kwargs)
