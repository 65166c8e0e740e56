"""Secrets read from settings or files, and the error raised when one is missing or unreadable."""

from __future__ import annotations

from pathlib import Path


class SecretError(ValueError):
    """A secret is missing, empty or unreadable; the message names the variable, never the value."""


def read_lines(path: Path, variable: str) -> list[str]:
    """Non-empty, non-comment lines of a secret file (the file named by `variable`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SecretError(f"{variable}: cannot read {path} ({exc.strerror or exc})") from None
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def secret_value(value: str | None, path: Path | None, variable: str) -> str | None:
    """`value` when set, else the first line of the file at `path`, else None."""
    if value:
        return value
    if path is None:
        return None
    lines = read_lines(path, variable)
    if not lines:
        raise SecretError(f"{variable}: {path} holds no secret")
    return lines[0]


def split_tokens(value: str | None) -> list[str]:
    """Comma-separated tokens, blanks dropped."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]
