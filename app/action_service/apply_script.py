"""The batch apply script's call and reply, as pure functions (no I/O).

`pack_call` turns a batch of actions into one EVALSHA command (RESP bytes, packed once per
batch by hiredis); `parse_reply` turns the script's flat reply back into one result per action.
The per-action key names and arguments are built in `_action_keys` / `_action_args` only, so a
change of key layout (Redis Cluster hash tags) touches those two and the script's `apply_one`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Final, Literal, NamedTuple

import hiredis

from app.action_service.redis_keys import (
    ALERTS_STREAM,
    EFFECTS_STREAM,
    STATS_KEY,
    card_alerts_key,
    card_key,
    idem_key,
)
from app.actions.action import Action
from app.actions.key import action_fingerprint

Verdict = Literal["created", "replay", "mismatch", "gone", "future"]
_VERDICTS: Final = frozenset(("created", "replay", "mismatch", "gone", "future"))
#: Shared keys before the per-action ones, shared arguments before the per-action ones.
_SHARED_KEYS: Final = (EFFECTS_STREAM, ALERTS_STREAM, STATS_KEY)
_KEYS_PER_ACTION: Final = 3
_ARGS_PER_ACTION: Final = 10
#: Reply fields per action: verdict, outcome, applied_at_ms, effect_id.
_REPLY_PER_ACTION: Final = 4


@functools.cache
def apply_script_source() -> str:
    """Text of the Lua script that applies a batch of actions, each atomically."""
    return resources.files("app.action_service").joinpath("apply_batch.lua").read_text("utf-8")


@functools.cache
def apply_script_sha() -> str:
    """SHA1 of the script, as EVALSHA names it."""
    import hashlib

    return hashlib.sha1(apply_script_source().encode("utf-8"), usedforsecurity=False).hexdigest()


class ApplyResult(NamedTuple):
    """What the apply script decided and the server time it used; for created and replay
    also the key's stored outcome, applied_at_ms and effect_id. (A named tuple: one is built
    per action on the hot path, and a frozen dataclass costs several times as much.)"""

    verdict: Verdict
    now_ms: int
    outcome: str | None = None
    applied_at_ms: int | None = None
    effect_id: str | None = None


class ScriptActionError(Exception):
    """The script refused one action of a batch with an error (e.g. a key of the wrong type);
    nothing was written for it. Answered 500."""


@dataclass(frozen=True, slots=True)
class ScriptLimits:
    """The script's shared arguments: key TTL, 410/future rule bounds, alerts kept per card."""

    ttl_ms: int
    max_age_ms: int
    margin_ms: int
    alerts_per_card: int


def _action_keys(action: Action) -> tuple[str, str, str]:
    return (idem_key(action.idempotency_key), card_key(action.card_id),
            card_alerts_key(action.card_id))


def _action_args(action: Action) -> tuple[str, ...]:
    # the freeze reason is read by the script for a freeze only
    reason = (f"freeze_card by model {action.model_version} (score {action.score:.6g})"
              if action.type == "freeze_card" else "")
    return (
        action.idempotency_key,
        action_fingerprint(action),
        action.type,
        action.card_id,
        action.txn_id,
        str(action.ts_ms),
        repr(action.score),
        action.model_version,
        str(action.decided_at_ms),
        reason,
    )


def pack_call(actions: Sequence[Action], limits: ScriptLimits) -> bytes:
    """One `EVALSHA` of the apply script for `actions`, in RESP (what goes on the wire)."""
    keys: list[str] = list(_SHARED_KEYS)
    args: list[str] = [str(limits.ttl_ms), str(limits.max_age_ms), str(limits.margin_ms),
                       str(limits.alerts_per_card)]
    for action in actions:
        keys += _action_keys(action)
        args += _action_args(action)
    return hiredis.pack_command(("EVALSHA", apply_script_sha(), len(keys), *keys, *args))


def parse_reply(reply: Sequence[str], count: int) -> list[ApplyResult | ScriptActionError]:
    """The script's reply for a batch of `count` actions: one result (or error) per action."""
    if len(reply) != 1 + _REPLY_PER_ACTION * count:
        raise RuntimeError(f"apply script answered {len(reply)} fields for {count} actions")
    now_ms = int(reply[0])
    results: list[ApplyResult | ScriptActionError] = []
    for i in range(1, len(reply), _REPLY_PER_ACTION):
        verdict, outcome, applied_at, effect_id = reply[i : i + _REPLY_PER_ACTION]
        if verdict in ("created", "replay"):
            results.append(ApplyResult(verdict, now_ms, outcome, int(applied_at), effect_id))
        elif verdict in _VERDICTS:
            results.append(ApplyResult(verdict, now_ms))  # type: ignore[arg-type]
        elif verdict == "error":
            results.append(ScriptActionError(outcome))
        else:
            raise RuntimeError(f"apply script returned an unknown verdict {verdict!r}")
    return results
