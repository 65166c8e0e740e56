"""The skew audit: served feature vectors compared bit for bit with the offline recomputation."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

from app.features.declaration import FEATURE_NAMES, HOUR_MS, MERCHANT_FEATURE_NAMES
from app.features.merchant import MerchantBook

#: Compared per served row besides the features (the served row must name the same event).
_CHECKED: Final = ("ts_ms", *FEATURE_NAMES)
_NAMES: Final = frozenset(FEATURE_NAMES)
ABSENT: Final = "<absent>"

Key = tuple[str, str]  # (card_id, txn_id)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One served value that is not the offline value."""

    card_id: str
    txn_id: str
    feature: str
    served: Any
    expected: Any


@dataclass(slots=True)
class AuditReport:
    """What the audit compared and everything that disagreed."""

    compared: int = 0
    mismatched_rows: int = 0
    mismatches: Counter[str] = field(default_factory=Counter)  # feature -> served rows
    examples: dict[str, list[Mismatch]] = field(default_factory=dict)
    missing_offline: list[Key] = field(default_factory=list)  # served, no accepted row offline
    never_served: list[Key] = field(default_factory=list)  # accepted offline, never served
    invalid_rows: int = 0  # served rows without txn_id / card_id / features

    @property
    def ok(self) -> bool:
        """True when every served row matched and every offline row was served."""
        return not (self.mismatches or self.missing_offline or self.never_served
                    or self.invalid_rows)

    def render(self, *, examples: int = 3) -> str:
        """A human-readable report."""
        lines = [f"compared {self.compared} served rows: {self.mismatched_rows} with mismatches"]
        for name in _CHECKED:
            if name in self.mismatches:
                lines.append(f"  {name}: {self.mismatches[name]} mismatches")
                for m in self.examples.get(name, [])[:examples]:
                    lines.append(f"    txn {m.txn_id} (card {m.card_id}): "
                                 f"served {m.served!r}, expected {m.expected!r}")
        for name, count in sorted(self.mismatches.items()):
            if name not in _CHECKED:
                lines.append(f"  {name}: {count} served rows carry this undeclared feature")
        lines.append(f"served but missing offline: {len(self.missing_offline)}"
                     + _few(self.missing_offline, examples))
        lines.append(f"offline but never served: {len(self.never_served)}"
                     + _few(self.never_served, examples))
        if self.invalid_rows:
            lines.append(f"invalid served rows: {self.invalid_rows}")
        lines.append("OK" if self.ok else "SKEW")
        return "\n".join(lines)


def _few(keys: list[Key], n: int) -> str:
    if not keys:
        return ""
    shown = ", ".join(f"{txn} (card {card})" for card, txn in keys[:n])
    return f" e.g. {shown}" + (" ..." if len(keys) > n else "")


def same_value(served: Any, expected: Any) -> bool:
    """Bit-for-bit equality: same type (int is not float, bool is not int) and same bits."""
    if type(served) is not type(expected):
        return False
    if type(expected) is float:
        return struct.pack("<d", served) == struct.pack("<d", expected)
    return bool(served == expected)


_MERCHANT_AT: Final = len(_CHECKED) - len(MERCHANT_FEATURE_NAMES)


def _offline_index(table: pa.Table) -> dict[Key, tuple[Any, ...]]:
    cols = [table.column(name).to_pylist() for name in ("card_id", "txn_id", *_CHECKED)]
    return {(row[0], row[1]): row[2:] for row in zip(*cols, strict=True)}


def audit(served_rows: Iterable[object], offline_table: pa.Table, *,
          labels: MerchantBook | None = None) -> AuditReport:
    """Compare each served row (redeliveries included) with the offline row of its transaction.

    A served row is a mapping with txn_id, card_id, ts_ms and features ({name: value}); any
    other item counts as invalid. Offline rows are keyed by (card_id, txn_id). The offline
    merchant features are those of the whole label log; a row served with a label cut before
    its transaction's hour (`label_cut_ms`) is compared with the merchant features of that cut,
    recomputed from `labels` (the same log as a book; the table must carry `merchant_id`).
    """
    expected_by_key = _offline_index(offline_table)
    merchant_of: dict[Key, str] = {}
    if labels is not None and "merchant_id" in offline_table.column_names:
        cols = [offline_table.column(n).to_pylist() for n in ("card_id", "txn_id", "merchant_id")]
        merchant_of = {(c, t): m for c, t, m in zip(*cols, strict=True)}
    report = AuditReport()
    served_keys: set[Key] = set()
    for row in served_rows:
        feats = row.get("features") if isinstance(row, Mapping) else None
        if not isinstance(row, Mapping) or not isinstance(feats, Mapping) or not all(
                isinstance(row.get(k), str) for k in ("card_id", "txn_id")):
            report.invalid_rows += 1
            continue
        key: Key = (row["card_id"], row["txn_id"])
        served_keys.add(key)
        expected = expected_by_key.get(key)
        if expected is None:
            report.missing_offline.append(key)
            continue
        report.compared += 1
        cut = row.get("label_cut_ms")
        if (type(cut) is int and labels is not None and key in merchant_of
                and cut // HOUR_MS < expected[0] // HOUR_MS):
            at_cut = labels.vector(merchant_of[key], expected[0], cut)
            expected = (*expected[:_MERCHANT_AT], *at_cut)
        bad = False
        served_values = [row.get("ts_ms", ABSENT), *(feats.get(n, ABSENT) for n in FEATURE_NAMES)]
        for name, got, want in zip(_CHECKED, served_values, expected, strict=True):
            if not same_value(got, want):
                bad = True
                _record(report, Mismatch(key[0], key[1], name, got, want))
        for name in feats:
            if name not in _NAMES:
                bad = True
                _record(report, Mismatch(key[0], key[1], str(name), feats[name], ABSENT))
        report.mismatched_rows += bad
    report.never_served = [k for k in expected_by_key if k not in served_keys]
    return report


def _record(report: AuditReport, m: Mismatch, keep: int = 5) -> None:
    report.mismatches[m.feature] += 1
    examples = report.examples.setdefault(m.feature, [])
    if len(examples) < keep:
        examples.append(m)
