"""Redis databases for tests: one URL per database index, flushed only there."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def with_db(url: str, db: int) -> str:
    """The same Redis URL pointed at database index `db`."""
    parts = urlsplit(url)
    query = "&".join(q for q in parts.query.split("&") if q and not q.startswith("db="))
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", query, parts.fragment))


def flush_db(url: str) -> None:
    """FLUSHDB on exactly the database `url` names (never FLUSHALL)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()
