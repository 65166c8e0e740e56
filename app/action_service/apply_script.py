"""The batch apply script's call and reply, as pure functions (no I/O).

`pack_call` turns a batch of actions into one EVALSHA command (RESP bytes, packed once per
batch by hiredis); `parse_reply` turns the script's flat reply back into one result per action.
The per-action key names come from `redis_keys.action_keys` (seven keys, one slot per action) and
the arguments from `_action_args` only. On a single Redis one call carries a whole batch; on a
cluster `call_args` builds one call per shard (see cluster_batcher.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Final, Literal, NamedTuple

import hiredis
from redis.exceptions import RedisError

from app.action_service.redis_keys import action_keys, claim_key
from app.actions.action import Action
from app.actions.key import action_fingerprint

Verdict = Literal["created", "replay", "mismatch", "gone", "future"]
_VERDICTS: Final = frozenset(("created", "replay", "mismatch", "gone", "future"))
_ARGS_PER_ACTION: Final = 13
#: Reply fields per action: verdict, outcome, applied_at_ms, effect_id.
_REPLY_PER_ACTION: Final = 4


@functools.cache
def apply_script_source() -> str:
    """Text of the Lua script that applies a batch of actions, each atomically."""
    return resources.files("app.action_service").joinpath("apply_batch.lua").read_text("utf-8")


@functools.cache
def apply_script_sha() -> str:
    """SHA1 of the script, as EVALSHA names it."""
    return _sha1(apply_script_source())


@functools.cache
def claim_script_source() -> str:
    """Text of the Lua script that claims a batch of keys (cluster only, before applying)."""
    return resources.files("app.action_service").joinpath("claim_batch.lua").read_text("utf-8")


@functools.cache
def claim_script_sha() -> str:
    """SHA1 of the claim script."""
    return _sha1(claim_script_source())


def _sha1(text: str) -> str:
    import hashlib

    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()


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


class NotReplicatedError(RedisError):
    """WAIT after the script call counted fewer replicas than required within its timeout: the
    write is on the master but may not survive its failover. Answered 503; the client's retry
    of the same key is answered from the record once the replicas have it."""

    def __init__(self, acked: int, wanted: int, timeout_ms: int) -> None:
        super().__init__(f"the write reached {acked} of {wanted} required Redis replicas within "
                         f"{timeout_ms} ms; retry with the same key")
        self.acked = acked
        self.wanted = wanted


def wait_command(replicas: int, timeout_ms: int) -> tuple[str, int, int]:
    """`WAIT replicas timeout`, sent on the script's own connection right after it."""
    return ("WAIT", replicas, timeout_ms)


def require_replicas(results: list[ApplyResult | Exception], acked: int, wanted: int,
                     timeout_ms: int) -> list[ApplyResult | Exception]:
    """`results` with every created or replayed answer replaced by NotReplicatedError when
    fewer than `wanted` replicas acknowledged (a replay too: its record may be the very write
    that was not acknowledged, and its own counter write comes after it in the replication
    stream, so its WAIT covers the record)."""
    if acked >= wanted:
        return results
    error = NotReplicatedError(acked, wanted, timeout_ms)
    return [error if isinstance(r, ApplyResult) and r.verdict in ("created", "replay") else r
            for r in results]


@dataclass(frozen=True, slots=True)
class ScriptLimits:
    """The script's shared arguments: key TTL, 410/future rule bounds, alerts kept per card."""

    ttl_ms: int
    max_age_ms: int
    margin_ms: int
    alerts_per_card: int

    @property
    def claim_ttl_ms(self) -> int:
        """A claim outlives its record (written a moment later on a cluster) by the margin."""
        return self.ttl_ms + self.margin_ms


def _action_args(action: Action) -> tuple[str, ...]:
    # the freeze reason is read by the script for a freeze only
    reason = "" if action.type != "freeze_card" else (
        f"freeze_card by model {action.model_version} (score {action.score:.6g})"
        if action.rule is None else
        f"freeze_card by {action.decided_by} {action.rule} (model score {action.score:.6g})")
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
        action.explanation_json(),
        action.decided_by,
        action.rule or "",
    )


def call_args(actions: Sequence[Action], limits: ScriptLimits, *,
              claims: bool) -> tuple[str | int, ...]:
    """The `EVALSHA` command of the apply script for `actions`, as command arguments; with
    `claims` each action's claim key is checked and written in the same call (single Redis)."""
    keys: list[str] = []
    args: list[str] = [str(limits.ttl_ms), str(limits.max_age_ms), str(limits.margin_ms),
                       str(limits.alerts_per_card), str(limits.claim_ttl_ms) if claims else ""]
    for action in actions:
        keys += action_keys(action.idempotency_key, action.card_id)
        if claims:
            keys.append(claim_key(action.idempotency_key))
        args += _action_args(action)
    return ("EVALSHA", apply_script_sha(), len(keys), *keys, *args)


def pack_call(actions: Sequence[Action], limits: ScriptLimits) -> bytes:
    """One `EVALSHA` of the apply script for `actions`, claims included (a single Redis), in
    RESP (what goes on the wire)."""
    return hiredis.pack_command(call_args(actions, limits, claims=True))


ClaimVerdict = Literal["held", "claimed", "mismatch", "gone", "future", "error"]


def claim_call_args(actions: Sequence[Action], limits: ScriptLimits) -> tuple[str | int, ...]:
    """The `EVALSHA` of the claim script for `actions` (all of one key shard)."""
    keys = [claim_key(action.idempotency_key) for action in actions]
    args: list[str] = [str(limits.claim_ttl_ms), str(limits.max_age_ms), str(limits.margin_ms)]
    for action in actions:
        args += (action_fingerprint(action), action.card_id, str(action.decided_at_ms))
    return ("EVALSHA", claim_script_sha(), len(keys), *keys, *args)


def parse_claims(reply: Sequence[str], count: int) -> tuple[int, list[ClaimVerdict]]:
    """The claim script's reply: its server time and one verdict per action."""
    if len(reply) != 1 + count:
        raise RuntimeError(f"claim script answered {len(reply)} fields for {count} actions")
    verdicts = list(reply[1:])
    for verdict in verdicts:
        if verdict not in ("held", "claimed", "mismatch", "gone", "future", "error"):
            raise RuntimeError(f"claim script returned an unknown verdict {verdict!r}")
    return int(reply[0]), verdicts  # type: ignore[return-value]


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
