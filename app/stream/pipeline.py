"""The score agent's per-batch logic, free of Faust: validate, route, fold into card state."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from app.features.declaration import FEATURE_NAMES
from app.features.state import Accepted, CardState, Late, Redelivered
from app.stream import metrics, topics
from app.stream.records import OutRecord, SourceMessage, rejected_record
from app.transactions.contract import ContractError, Transaction, parse_transaction

log = logging.getLogger(__name__)


class CardStore(Protocol):
    """Where card state lives between events (a Faust table online, a dict in unit tests)."""

    def load(self, card_id: str) -> bytes | None:
        """The card's serialized state, or None for a card never seen."""

    def save(self, card_id: str, data: bytes, source: SourceMessage) -> None:
        """Persist the card's state; `source` is the last message that changed it."""


@dataclass(frozen=True, slots=True)
class Scored:
    """A transaction that passed the contract and the lateness rule, with its feature vector."""

    source: SourceMessage
    txn: Transaction
    features: tuple[int | float, ...]
    redelivered: bool


@dataclass(slots=True)
class BatchOutcome:
    """Everything one batch produced: records to send now and transactions to score."""

    records: list[OutRecord] = field(default_factory=list)
    scored: list[Scored] = field(default_factory=list)


class TransactionPipeline:
    """Validate → DLQ, fold into per-card state → late topic or a feature vector.

    State is loaded once per card per batch and saved once per card per batch (after all its
    events in the batch), so a batch costs one changelog write per card, not per event.
    """

    def __init__(
        self,
        store: CardStore,
        *,
        clock_ms: Callable[[], int],
        allowed_lateness_ms: int,
        max_message_bytes: int,
    ) -> None:
        self.store = store
        self.clock_ms = clock_ms
        self.allowed_lateness_ms = allowed_lateness_ms
        self.max_message_bytes = max_message_bytes

    def process(self, batch: Sequence[SourceMessage]) -> BatchOutcome:
        out = BatchOutcome()
        now_ms = self.clock_ms()
        states: dict[str, CardState] = {}
        last_change: dict[str, SourceMessage] = {}
        for msg in batch:
            try:
                txn = parse_transaction(msg.value, now_ms=now_ms, max_bytes=self.max_message_bytes)
            except ContractError as exc:
                rej = exc.rejection
                metrics.DLQ_MESSAGES.labels(rej.code, rej.field or "").inc()
                out.records.append(rejected_record(
                    topics.TRANSACTIONS_DLQ, msg, code=rej.code, reason=rej.reason, field=rej.field))
                continue
            state = states.get(txn.card_id)
            if state is None:
                raw = self.store.load(txn.card_id)
                state = CardState.empty() if raw is None else CardState.from_bytes(raw)
                states[txn.card_id] = state
            outcome = state.apply(txn, allowed_lateness_ms=self.allowed_lateness_ms)
            if isinstance(outcome, Late):
                metrics.LATE_MESSAGES.inc()
                out.records.append(rejected_record(
                    topics.TRANSACTIONS_LATE, msg, code="late", reason=outcome.reason))
            elif isinstance(outcome, Redelivered):
                metrics.REDELIVERED.inc()
                out.scored.append(Scored(msg, txn, tuple(outcome.features), True))
            elif isinstance(outcome, Accepted):
                last_change[txn.card_id] = msg
                out.scored.append(Scored(msg, txn, tuple(outcome.features), False))
        for card_id, msg in last_change.items():
            self.store.save(card_id, states[card_id].to_bytes(), msg)
        return out


def served_row(item: Scored, *, score: float | None, model_version: str | None) -> dict[str, Any]:
    """The features.served record: what was served for one transaction, and where it came from."""
    return {
        "txn_id": item.txn.txn_id,
        "card_id": item.txn.card_id,
        "ts_ms": item.txn.ts_ms,
        "partition": item.source.partition,
        "offset": item.source.offset,
        "features": dict(zip(FEATURE_NAMES, item.features, strict=True)),
        "score": score,
        "model_version": model_version,
        "redelivered": item.redelivered,
    }


def served_record(item: Scored, *, score: float | None, model_version: str | None) -> OutRecord:
    """`served_row` as a message for features.served, keyed by card_id."""
    row = served_row(item, score=score, model_version=model_version)
    return OutRecord(topics.FEATURES_SERVED, item.txn.card_id.encode(), orjson.dumps(row))
