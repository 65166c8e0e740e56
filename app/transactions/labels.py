"""The label contract: when a transaction's truth (fraud or not) became known."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Label:
    """A fraud label for one transaction: 1 fraud, 0 legitimate, known from `label_ts_ms` on."""

    txn_id: str
    label: int
    label_ts_ms: int
