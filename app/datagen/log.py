"""A generated log in memory: its transactions, delivery order, bad messages, labels and counts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np

from app.datagen.columns import LEGIT, PATTERNS, Pattern, TxnColumns
from app.datagen.config import GeneratorConfig
from app.datagen.delivery import LINE_KINDS, MALFORMED, REDELIVERY, VALID, Delivery, LineKind
from app.datagen.lines import label_lines, transaction, txn_id, txn_lines
from app.datagen.malformed import BadMessage
from app.transactions.contract import Transaction
from app.transactions.labels import Label

#: Lines formatted at a time when streaming a log out.
CHUNK_LINES: Final = 1 << 16




@dataclass(frozen=True, slots=True)
class LogCounts:
    """What a generated log holds (the CLI's summary)."""

    lines: int
    transactions: int
    redelivered: int
    malformed: int
    displaced: int
    #: Transactions that arrive older than their card's max ts minus the allowed lateness.
    late: int
    fraud_by_pattern: dict[str, int]
    malformed_by_kind: dict[str, int]

    @property
    def fraud(self) -> int:
        """Fraudulent transactions, all patterns."""
        return sum(self.fraud_by_pattern.values())


@dataclass(frozen=True, slots=True)
class GeneratedLog:
    """A whole log: transactions sorted by event time (row = sequence number) and file order."""

    config: GeneratorConfig
    #: Short hash of the settings that shape the transactions; part of every txn_id.
    tag: str
    txns: TxnColumns
    label_ts: np.ndarray
    delivery: Delivery
    #: The bad messages in the order they appear in the file.
    bad_messages: tuple[BadMessage, ...]

    def __len__(self) -> int:
        """Number of lines."""
        return len(self.delivery.row)

    @property
    def counts(self) -> LogCounts:
        """Counts of lines by kind, displaced and late events, fraud and bad messages."""
        kinds = np.bincount(self.delivery.kind, minlength=len(LINE_KINDS))
        patterns = np.bincount(self.txns.pattern, minlength=len(PATTERNS))
        by_kind: dict[str, int] = {}
        for bad in self.bad_messages:
            by_kind[bad.kind] = by_kind.get(bad.kind, 0) + 1
        return LogCounts(
            lines=len(self),
            transactions=int(kinds[VALID]),
            redelivered=int(kinds[REDELIVERY]),
            malformed=int(kinds[MALFORMED]),
            displaced=int(self.delivery.displaced.sum()),
            late=int(self.delivery.late.sum()),
            fraud_by_pattern={p: int(patterns[i]) for i, p in enumerate(PATTERNS) if i != LEGIT},
            malformed_by_kind=dict(sorted(by_kind.items())),
        )

    def txn_id(self, row: int) -> str:
        """The txn_id of transaction `row`."""
        return txn_id(self.tag, row)

    def pattern(self, row: int) -> Pattern:
        """The fraud pattern transaction `row` belongs to ("legit" if none)."""
        return PATTERNS[int(self.txns.pattern[row])]

    def transaction(self, row: int) -> Transaction:
        """Transaction `row` as the contract's record."""
        return transaction(self.tag, self.txns, row)

    def iter_lines(self, chunk_lines: int = CHUNK_LINES) -> Iterator[tuple[bytes, LineKind]]:
        """Every line (without its newline) in file order, with its kind."""
        for start in range(0, len(self), chunk_lines):
            kinds = self.delivery.kind[start : start + chunk_lines].tolist()
            yield from zip(self._chunk(start, chunk_lines), (LINE_KINDS[k] for k in kinds),
                           strict=True)

    def jsonl_chunks(self, chunk_lines: int = CHUNK_LINES) -> Iterator[bytes]:
        """The JSONL file as consecutive byte chunks, each ending with a newline."""
        for start in range(0, len(self), chunk_lines):
            yield b"\n".join(self._chunk(start, chunk_lines)) + b"\n"

    def label_rows(self) -> np.ndarray:
        """Transaction rows in the order of their first line in the file."""
        return self.delivery.row[self.delivery.kind == VALID]

    def labels(self) -> Iterator[Label]:
        """One label per transaction, in the order of their first line."""
        for row in self.label_rows().tolist():
            fraud = int(self.txns.pattern[row] != LEGIT)
            yield Label(self.txn_id(row), fraud, int(self.label_ts[row]))

    def label_chunks(self, chunk_lines: int = CHUNK_LINES) -> Iterator[bytes]:
        """The labels JSONL file as consecutive byte chunks, each ending with a newline."""
        rows = self.label_rows()
        for start in range(0, len(rows), chunk_lines):
            part = rows[start : start + chunk_lines]
            yield b"\n".join(label_lines(self.tag, self.txns, self.label_ts, part)) + b"\n"

    def _chunk(self, start: int, size: int) -> list[bytes]:
        row = self.delivery.row[start : start + size]
        bad = self.delivery.kind[start : start + size] == MALFORMED
        lines = txn_lines(self.tag, self.txns, np.where(bad, 0, row))
        for i in np.flatnonzero(bad).tolist():
            lines[i] = self.bad_messages[int(row[i])].raw
        return lines
