"""The score agent's per-batch logic, free of Faust: validate, route, fold into card state."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from app.features.merchant import EMPTY, NO_CUT
from app.features.state import Accepted, CardState, Late, Redelivered, StreamCardState, joined
from app.kafka import topics
from app.kafka.records import OutRecord, SourceMessage, rejected_record
from app.stream import metrics
from app.stream.engine.served import encode_served_batch
from app.stream.state import cardrecord
from app.transactions.contract import ContractError, Transaction, parse_transaction

log = logging.getLogger(__name__)


class CardStore(Protocol):
    """Where card state lives between events (a Faust table online, a dict in unit tests)."""

    def load(self, card_id: str) -> bytes | None:
        """The card's stored record (see app.stream.state.cardrecord), or None for a card never
        seen."""

    def save(self, card_id: str, data: bytes, partition: int) -> None:
        """Persist the card's record; `partition` is the source partition of its last message."""


class DictCards:
    """A CardStore in a dict (`data`: card id → record), for unit tests and benchmarks."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def load(self, card_id: str) -> bytes | None:
        return self.data.get(card_id)

    def save(self, card_id: str, data: bytes, partition: int) -> None:
        self.data[card_id] = data


class MerchantFeatures(Protocol):
    """The label-fed merchant features as the worker reads them (app.stream.feeds.labelfeed)."""

    @property
    def cut_ms(self) -> int:
        """Every label reported before this time has been read."""

    def vector(self, merchant_id: str, ts_ms: int, cut_ms: int) -> tuple[int | float, ...]:
        """The merchant features of a transaction (MERCHANT_FEATURE_NAMES order)."""


class _NoLabels:
    """No label feed (unit tests, tools): every merchant feature as without any label."""

    cut_ms = NO_CUT

    @staticmethod
    def vector(merchant_id: str, ts_ms: int, cut_ms: int) -> tuple[int | float, ...]:
        return EMPTY


class Scored(msgspec.Struct, frozen=True, gc=False):
    """A transaction that passed the contract and the lateness rule, with its feature vector
    (the card's features, then the merchant's as of `label_cut_ms`). Not tracked by the garbage
    collector (nothing it holds can hold it: no cycle): one tracked allocation fewer an event,
    a third of the fold's young collections."""

    source: SourceMessage
    txn: Transaction
    features: tuple[int | float, ...]
    redelivered: bool
    label_cut_ms: int | None = None


@dataclass(slots=True)
class BatchOutcome:
    """Everything one batch produced: records to send now and transactions to score."""

    records: list[OutRecord] = field(default_factory=list)
    scored: list[Scored] = field(default_factory=list)
    #: card records to save once the outputs are durable: card_id → (source partition, record);
    #: with `process(..., snapshot=False)` empty, the changed cards wait for a later snapshot
    saves: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    #: re-read messages the card's state already held and no longer remembers: no output
    skipped: int = 0


@dataclass(slots=True)
class _Card:
    state: CardState
    partition: int
    offset: int


class TransactionPipeline:
    """Validate → DLQ, fold into per-card state → late topic or a feature vector.

    Decoded card states are kept between batches (the store is read once per card, on first
    sight) until `forget` (a rebalance). A snapshot yields one record per card changed since
    the previous snapshot, taken after all its events so far: a batch processed without one
    leaves its cards for the next, so a card changed by several batches is serialized once.
    Each record carries the source position of the card's last message
    (app.stream.state.cardrecord); a message at or before it is a re-read and is never folded in
    twice.
    """

    def __init__(
        self,
        store: CardStore,
        *,
        clock_ms: Callable[[], int],
        allowed_lateness_ms: int,
        max_message_bytes: int,
        max_cached_cards: int = 0,
        merchants: MerchantFeatures | None = None,
    ) -> None:
        if max_cached_cards < 0:
            raise ValueError(f"max_cached_cards must be >= 0, got {max_cached_cards}")
        self.store = store
        #: decoded states kept between batches, least recently used let go first (0: no bound)
        self.max_cached_cards = max_cached_cards
        self.clock_ms = clock_ms
        self.allowed_lateness_ms = allowed_lateness_ms
        self.max_message_bytes = max_message_bytes
        self._cards: dict[str, _Card] = {}
        self._changed: dict[str, _Card] = {}  # changed since the last snapshot
        #: the merchant features' source (a label feed online; none: every one as without labels)
        self.merchants: MerchantFeatures = merchants if merchants is not None else _NoLabels()

    @property
    def cached_cards(self) -> int:
        """Decoded card states held between batches."""
        return len(self._cards)

    @property
    def cached_events(self) -> int:
        """Events buffered in the decoded states (what their memory grows with; O(cards))."""
        return sum(len(card.state) for card in self._cards.values())

    def forget(self) -> None:
        """Drop the decoded states (partitions moved): the next batch reads the store again."""
        self._cards.clear()
        self._changed.clear()
        metrics.CARDS_CACHED.set(0)

    def process(self, batch: Sequence[SourceMessage], *, snapshot: bool = True) -> BatchOutcome:
        """Route and fold a batch. Nothing is saved: call `persist` once the outputs are flushed,
        so a stored card position always implies its messages' outputs are in Kafka.

        `snapshot`: fill `saves` with every card changed since the last snapshot (this batch
        included); False leaves them for a later one (see `snapshot`)."""
        out = BatchOutcome()
        now_ms = self.clock_ms()
        cards = self._cards
        changed = self._changed
        # one cut per batch: every row of it is as of the same label feed
        cut = self.merchants.cut_ms
        merchant = self.merchants.vector
        served_cut = None if cut == NO_CUT else cut
        for msg in batch:
            try:
                txn = parse_transaction(msg.value, now_ms=now_ms,
                                        max_bytes=self.max_message_bytes)
            except ContractError as exc:
                rej = exc.rejection
                metrics.DLQ_MESSAGES.labels(rej.code, rej.field or "").inc()
                out.records.append(rejected_record(
                    topics.TRANSACTIONS_DLQ, msg, code=rej.code, reason=rej.reason, field=rej.field))
                continue
            card_id = txn.card_id
            card = cards.pop(card_id, None)  # re-inserted: the dict's order is recency
            if card is None:
                card = self._load(card_id)
            cards[card_id] = card
            partition, offset = msg.partition, msg.offset
            if partition == card.partition and offset <= card.offset:
                # read again (a crash or rebalance before the offset commit): already applied.
                # Offsets compare only within a partition: a card whose messages come keyed
                # differently, on another partition, is not fenced there.
                features = card.state.recall(txn.txn_id)
                if features is None:
                    metrics.REREAD_SKIPPED.inc()
                    out.skipped += 1
                else:  # still remembered: serve it again, same features, same action keys
                    metrics.REDELIVERED.inc()
                    out.scored.append(Scored(msg, txn, joined(
                        features, merchant(txn.merchant_id, txn.ts_ms, cut)), True, served_cut))
                continue
            outcome = card.state.apply(txn, allowed_lateness_ms=self.allowed_lateness_ms)
            card.partition, card.offset = partition, offset
            changed[card_id] = card
            kind = type(outcome)
            if kind is Accepted:
                out.scored.append(Scored(msg, txn, joined(
                    outcome.features, merchant(txn.merchant_id, txn.ts_ms, cut)), False, served_cut))
            elif kind is Late:
                metrics.LATE_MESSAGES.inc()
                out.records.append(rejected_record(
                    topics.TRANSACTIONS_LATE, msg, code="late", reason=outcome.reason))
            elif kind is Redelivered:
                metrics.REDELIVERED.inc()
                out.scored.append(Scored(msg, txn, joined(
                    outcome.features, merchant(txn.merchant_id, txn.ts_ms, cut)), True, served_cut))
            else:  # pragma: no cover - apply gives one of the three
                raise TypeError(f"unexpected outcome {outcome!r}")
        if snapshot:
            out.saves = self.snapshot()
        if self.max_cached_cards and len(cards) > self.max_cached_cards:
            self._trim()
        metrics.CARDS_CACHED.set(len(cards))
        return out

    def _trim(self) -> None:
        """Let the least recently used decoded states go, down to the bound. A card changed
        since the last snapshot stays (its only copy is here); one in a snapshot on its way
        to the store is read back from the store's staged records (app.stream.state.cardstore)."""
        cards, changed = self._cards, self._changed
        excess = len(cards) - self.max_cached_cards
        victims = []
        for card_id in cards:  # oldest first
            if card_id not in changed:
                victims.append(card_id)
                if len(victims) == excess:
                    break
        for card_id in victims:
            del cards[card_id]

    @property
    def changed_cards(self) -> int:
        """Cards changed since the last snapshot (not yet in one)."""
        return len(self._changed)

    def snapshot(self, limit: int | None = None) -> dict[str, tuple[int, bytes]]:
        """The record of every card changed since the last snapshot: card_id → (source
        partition, record). Take it only between batches: it covers everything folded so far.
        `limit`: at most that many (the first changed); the others stay for the next call."""
        if limit is None or limit >= len(self._changed):
            changed, self._changed = self._changed, {}
        else:
            pending = self._changed
            changed = {card_id: pending[card_id] for card_id in itertools.islice(pending, limit)}
            for card_id in changed:
                del pending[card_id]
        return {card_id: (c.partition, cardrecord.record(c.partition, c.offset, c.state))
                for card_id, c in changed.items()}

    def persist(self, outcome: BatchOutcome) -> None:
        """Save the batch's card records in the store (what the checkpoint does online)."""
        for card_id, (partition, record) in outcome.saves.items():
            self.store.save(card_id, record, partition)

    def _load(self, card_id: str) -> _Card:
        raw = self.store.load(card_id)
        if raw is None:
            return _Card(StreamCardState.empty(), *cardrecord.NOWHERE)
        rec = cardrecord.unpack(raw)
        return _Card(StreamCardState.from_bytes(rec.state), rec.partition, rec.offset)


def served_records(items: Sequence[Scored], scores: Sequence[float | None],
                   model_version: str | None) -> list[OutRecord]:
    """The features.served record (app.stream.engine.served.ServedRow) of each scored
    transaction with its score, keyed by card_id: what was served, and where it came from (the
    batch's rows encoded in one buffer)."""
    values = encode_served_batch(items, scores, model_version)
    topic = topics.FEATURES_SERVED
    return [OutRecord(topic, item.txn.card_id.encode(), value, (), item.source.partition)
            for item, value in zip(items, values, strict=True)]
