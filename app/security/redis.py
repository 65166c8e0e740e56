"""Redis connection options from settings: TLS CA for rediss:// URLs and the ACL user."""

from __future__ import annotations

from typing import Any

from app.security.secret import secret_value
from app.settings import Settings


def redis_connection_kwargs(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for `redis.Redis.from_url` / `ConnectionPool.from_url`.

    TLS itself is chosen by the URL scheme (`rediss://`); the CA applies only then. A user
    or password in the URL wins over these (redis-py's rule).
    """
    kwargs: dict[str, Any] = {}
    if settings.effective_redis_url.startswith("rediss://"):
        kwargs["ssl_cert_reqs"] = "required"
        if settings.redis_ssl_ca_file is not None:
            kwargs["ssl_ca_certs"] = str(settings.redis_ssl_ca_file)
    if settings.redis_username:
        kwargs["username"] = settings.redis_username
    password = secret_value(settings.redis_password, settings.redis_password_file,
                            "FRAUDSTREAM_REDIS_PASSWORD_FILE")
    if password:
        kwargs["password"] = password
    return kwargs
