"""Transactions as parallel numpy columns, and the labelled fraud patterns they may belong to."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final, Literal

import numpy as np

Pattern = Literal["legit", "card_testing", "account_takeover", "compromised_merchant"]
#: Pattern codes as stored in TxnColumns.pattern; index = code, 0 is legitimate.
PATTERNS: Final[tuple[Pattern, ...]] = (
    "legit",
    "card_testing",
    "account_takeover",
    "compromised_merchant",
)
LEGIT, CARD_TESTING, ACCOUNT_TAKEOVER, COMPROMISED_MERCHANT = range(4)


@dataclass(frozen=True, slots=True)
class TxnColumns:
    """One row per transaction; ids and strings are derived from these integers when written."""

    card: np.ndarray
    ts: np.ndarray
    amount: np.ndarray
    merchant: np.ndarray
    mcc: np.ndarray
    country: np.ndarray
    channel: np.ndarray
    pattern: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, index: np.ndarray) -> TxnColumns:
        """The rows at `index`, in that order."""
        return TxnColumns(*(getattr(self, f.name)[index] for f in fields(self)))

    @staticmethod
    def concat(parts: list[TxnColumns]) -> TxnColumns:
        """All rows of `parts`, one after the other."""
        return TxnColumns(
            *(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(TxnColumns))
        )

    @staticmethod
    def empty() -> TxnColumns:
        """No rows."""
        return TxnColumns(*(np.zeros(0, dtype=np.int64) for _ in fields(TxnColumns)))

    @staticmethod
    def build(
        *,
        card: np.ndarray,
        ts: np.ndarray,
        amount: np.ndarray,
        merchant: np.ndarray,
        mcc: np.ndarray,
        country: np.ndarray,
        channel: np.ndarray,
        pattern: int,
    ) -> TxnColumns:
        """Columns cast to int64, every row of one pattern."""
        cols = (card, ts, amount, merchant, mcc, country, channel)
        n = len(ts)
        if any(len(c) != n for c in cols):
            raise ValueError("all columns must have the same length")
        return TxnColumns(
            *(np.asarray(c, dtype=np.int64) for c in cols),
            pattern=np.full(n, pattern, dtype=np.int64),
        )
