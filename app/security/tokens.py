"""Bearer tokens of the action service: full-access and read-only sets, rotation, loopback dev token.

Each configured entry is `token` or `name:token`; the name (1..64 characters of
`[A-Za-z0-9_.@-]`) is who an analyst decision records as its author. An unnamed token is named
`token-<first 8 hex of its SHA-256>` (stable, and not the token itself); the dev token is `dev`.
A token that itself contains `:` after such a prefix must therefore be given a name.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit

from app.security.secret import SecretError, read_lines, split_tokens
from app.settings import Settings

#: Used only when no token is configured and the service binds (or the client targets) loopback.
LOCAL_DEV_TOKEN: Final = "dev-token-change-me"

Access = Literal["write", "read"]
_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def parse_entry(entry: str) -> tuple[str, str]:
    """(name, token) of a configured entry `name:token` or `token` (then a derived name)."""
    name, sep, token = entry.partition(":")
    if sep and token.strip() and _NAME_RE.fullmatch(name.strip()):
        return name.strip(), token.strip()
    return derived_name(entry), entry


def derived_name(token: str) -> str:
    """The name of an unnamed token: `token-` and 8 hex of its SHA-256 (reveals nothing usable)."""
    return "token-" + hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()[:8]


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
    #: names of `write` and `read`, position for position (derived when not given)
    write_names: tuple[str, ...] = ()
    read_names: tuple[str, ...] = ()

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

    def identify(self, given: str) -> tuple[Access, str] | None:
        """What a presented token may do and its name, or None (constant time like `access`)."""
        raw = given.encode("utf-8", "surrogateescape")
        write = [hmac.compare_digest(raw, t) for t in self.write]
        read = [hmac.compare_digest(raw, t) for t in self.read]
        if any(write):
            return "write", _name_at(self.write, self.write_names, write.index(True))
        if any(read):
            return "read", _name_at(self.read, self.read_names, read.index(True))
        return None


def _name_at(tokens: tuple[bytes, ...], names: tuple[str, ...], i: int) -> str:
    return names[i] if i < len(names) else derived_name(tokens[i].decode("utf-8",
                                                                         "surrogateescape"))


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


def write_entries(settings: Settings) -> list[tuple[str, str]]:
    """Configured full-access (name, token) pairs, in order (FRAUDSTREAM_ACTION_TOKEN, then its
    file)."""
    return [parse_entry(e) for e in _configured(settings.action_token, settings.action_token_file,
                                                "FRAUDSTREAM_ACTION_TOKEN")]


def write_tokens(settings: Settings) -> list[str]:
    """Configured full-access tokens (names stripped), in order."""
    return [token for _, token in write_entries(settings)]


def service_tokens(settings: Settings, host: str = "127.0.0.1") -> TokenSet:
    """The tokens a service bound on `host` accepts; the dev token only on loopback.

    Raises SecretError (one line, naming the variables) when none is configured on a
    non-loopback address.
    """
    write_named = write_entries(settings)
    read_named = [parse_entry(e) for e in _configured(
        settings.action_read_token, settings.action_read_token_file,
        "FRAUDSTREAM_ACTION_READ_TOKEN")]
    write = [token for _, token in write_named]
    read = [token for _, token in read_named]
    write_names = [name for name, _ in write_named]
    dev = not write
    if dev:
        if not is_loopback(host):
            raise SecretError(
                f"refusing to listen on {host} without a token: set FRAUDSTREAM_ACTION_TOKEN "
                "or FRAUDSTREAM_ACTION_TOKEN_FILE (the built-in dev token is loopback-only)"
            )
        write = [LOCAL_DEV_TOKEN]
        write_names = ["dev"]
    overlap = set(write) & set(read)
    if overlap:
        raise SecretError("a token is both full-access and read-only: "
                          "FRAUDSTREAM_ACTION_TOKEN and FRAUDSTREAM_ACTION_READ_TOKEN overlap")
    return TokenSet(tuple(t.encode() for t in write), tuple(t.encode() for t in read), dev,
                    tuple(write_names), tuple(name for name, _ in read_named))


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
