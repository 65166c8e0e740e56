"""The reference offline evaluator: `CardState.apply` per message, the oracle of the fast fold."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Final

import pyarrow as pa

from app.features.merchant import EMPTY
from app.features.offline import OfflineResult, feature_schema
from app.features.outcome import Accepted, Redelivered
from app.features.source import Rejects
from app.features.state import CardState
from app.transactions.contract import (
    DEFAULT_MAX_BYTES,
    ContractError,
    parse_transaction,
)


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Millions of short-lived, acyclic objects: the cyclic collector only costs time here.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


#: No labels here: every merchant feature as without any (app.features.merchant).
NO_LABELS: Final = EMPTY


def reference_features(
    lines: Iterable[bytes],
    *,
    allowed_lateness_ms: int,
    now_ms: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> OfflineResult:
    """Validate and apply every message in log order with the online `CardState`, one by one.

    Slow (tens of thousands of events/s) and obviously the stream's rules: the tests hold the
    compiled fold (offline.compute_features) to it, and it runs where the fold is not built.
    """
    schema = feature_schema()
    states: dict[str, CardState] = {}
    rows: list[tuple[object, ...]] = []
    rejects = Rejects()
    late_ids: set[str] = set()
    late = redelivered = 0
    with _gc_paused():
        for raw in lines:
            try:
                txn = parse_transaction(raw, now_ms=now_ms, max_bytes=max_bytes)
            except ContractError as exc:
                rejects.add(raw, exc, max_bytes)
                continue
            state = states.get(txn.card_id)
            if state is None:
                state = states[txn.card_id] = CardState.empty()
            outcome = state.apply(txn, allowed_lateness_ms=allowed_lateness_ms)
            if type(outcome) is Accepted:
                rows.append((txn.txn_id, txn.card_id, txn.ts_ms, *outcome.features, *NO_LABELS))
            elif type(outcome) is Redelivered:
                redelivered += 1
            else:
                late += 1
                late_ids.add(txn.txn_id)
        columns = list(zip(*rows, strict=True)) or [() for _ in schema]
        table = pa.Table.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
            schema=schema)
    return OfflineResult(table, len(rows), late, redelivered, dict(Counter(rejects.counts)),
                         frozenset(late_ids), frozenset(rejects.txn_ids))
