"""Which local stack layout is in use: asked for, else remembered from the last `stack up`."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import get_args

from app.settings import Settings, StackProfile

log = logging.getLogger(__name__)

PROFILES: tuple[str, ...] = get_args(StackProfile)


def profile_file(settings: Settings) -> Path:
    """Where `stack up` records the profile it brought up (inside the state dir)."""
    return settings.state_dir.resolve() / "stack-profile"


def remembered_profile(settings: Settings) -> StackProfile | None:
    """The profile `stack up` last recorded in this state dir, or None."""
    try:
        text = profile_file(settings).read_text().strip()
    except FileNotFoundError:
        return None
    if text not in PROFILES:
        log.warning("ignoring %s: unknown profile %r", profile_file(settings), text)
        return None
    return text  # type: ignore[return-value]


def resolve_profile(settings: Settings) -> Settings:
    """`settings` with a concrete profile: FRAUDSTREAM_STACK_PROFILE, else remembered, else single."""
    if settings.stack_profile is not None:
        return settings
    return settings.replace(stack_profile=remembered_profile(settings) or "single")


def remember_profile(settings: Settings) -> None:
    """Record the profile `stack up` brought up, for later `down`/`status`/`env` without a flag."""
    path = profile_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{settings.profile}\n")


def forget_profile(settings: Settings) -> None:
    """After `stack down`: the next command without a flag is back on the default."""
    with contextlib.suppress(FileNotFoundError):
        profile_file(settings).unlink()
