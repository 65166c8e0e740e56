"""Bearer tokens of the action service: full-access and read-only sets, rotation, loopback dev token."""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit

from app.security.secret import SecretError, read_lines, split_tokens
from app.settings import Settings

#: Used only when no token is configured and the service binds (or the client targets) loopback.
LOCAL_DEV_TOKEN: Final = "dev-token-change-me"

Access = Literal["write", "read"]


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class TokenSet:
    """The tokens a service accepts; compared in constant time, never shown in repr."""

    write: tuple[bytes, ...]
    read: tuple[bytes, ...] = ()
    dev: bool = False

    def __repr__(self) -> str:
        return f"TokenSet(write={len(self.write)}, read={len(self.read)}, dev={self.dev})"

    def access(self, given: str) -> Access | None:
        """What a presented token may do: 'write' (every route), 'read' (GET only) or None."""
        raw = given.encode("utf-8", "surrogateescape")
        # compare against every token so the time does not tell which set matched
        write = any([hmac.compare_digest(raw, t) for t in self.write])
        read = any([hmac.compare_digest(raw, t) for t in self.read])
        if write:
            return "write"
        return "read" if read else None


def _configured(value: str | None, path: Path | None, variable: str) -> list[str]:
    """Tokens of `variable` (comma-separated) followed by those of its file (one a line)."""
    tokens = split_tokens(value)
    if value is not None and not tokens:
        raise SecretError(f"{variable} must not be empty")
    if path is not None:
        lines = read_lines(path, f"{variable}_FILE")
        if not lines:
            raise SecretError(f"{variable}_FILE: {path} holds no token")
        tokens += [t for line in lines for t in split_tokens(line)]
    return tokens


def write_tokens(settings: Settings) -> list[str]:
    """Configured full-access tokens, in order (FRAUDSTREAM_ACTION_TOKEN, then its file)."""
    return _configured(settings.action_token, settings.action_token_file,
                       "FRAUDSTREAM_ACTION_TOKEN")


def service_tokens(settings: Settings, host: str = "127.0.0.1") -> TokenSet:
    """The tokens a service bound on `host` accepts; the dev token only on loopback.

    Raises SecretError (one line, naming the variables) when none is configured on a
    non-loopback address.
    """
    write = write_tokens(settings)
    read = _configured(settings.action_read_token, settings.action_read_token_file,
                       "FRAUDSTREAM_ACTION_READ_TOKEN")
    dev = not write
    if dev:
        if not is_loopback(host):
            raise SecretError(
                f"refusing to listen on {host} without a token: set FRAUDSTREAM_ACTION_TOKEN "
                "or FRAUDSTREAM_ACTION_TOKEN_FILE (the built-in dev token is loopback-only)"
            )
        write = [LOCAL_DEV_TOKEN]
    overlap = set(write) & set(read)
    if overlap:
        raise SecretError("a token is both full-access and read-only: "
                          "FRAUDSTREAM_ACTION_TOKEN and FRAUDSTREAM_ACTION_READ_TOKEN overlap")
    return TokenSet(tuple(t.encode() for t in write), tuple(t.encode() for t in read), dev)


def client_token(settings: Settings) -> str:
    """The token a client (dispatcher, demo) sends: the first configured full-access token,
    else the dev token when the action service URL is on loopback."""
    tokens = write_tokens(settings)
    if tokens:
        return tokens[0]
    host = urlsplit(settings.action_service_url).hostname or ""
    if is_loopback(host):
        return LOCAL_DEV_TOKEN
    raise SecretError(
        f"FRAUDSTREAM_ACTION_TOKEN (or _FILE) is required to call an action service on {host}"
    )
