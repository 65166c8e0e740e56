"""Drift injected into a generated log from a point in event time: `generate --drift SPEC`.

SPEC is comma-separated KEY=VALUE clauses (at least one besides `from`):
  from=TIME          where drift starts (ISO date/datetime, UTC if no zone, or ms) [default:
                     the log's start]
  amount=xF          every amount from then on multiplied by F (> 0), e.g. amount=x3
  country=CC:SHARE   that share (0..1] of transactions from then on made in country CC, e.g.
                     country=BR:0.4 (a new country mix; CC from the generator's catalog)
  fraud-rate=R       extra fraud incidents from then on, about R (0..0.5] of those transactions
                     (a fraud-pattern shift)
e.g. `from=2026-01-03,amount=x3,country=JP:0.3`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from app.datagen.catalog import COUNTRIES, country_index
from app.datagen.columns import TxnColumns
from app.transactions.contract import MAX_AMOUNT_MINOR

SPEC_HELP: Final = ("comma-separated KEY=VALUE: from=TIME, amount=xF, country=CC:SHARE, "
                    "fraud-rate=R, e.g. from=2026-01-03,amount=x3,country=JP:0.3")


class DriftSpecError(ValueError):
    """A --drift SPEC that does not parse; the message shows the expected form."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DriftSpec:
    """What changes from `from_ms` on (None: from the log's start)."""

    from_ms: int | None = None
    amount_factor: float | None = None
    country: str | None = None
    country_share: float = 0.0
    fraud_rate: float | None = None

    def describe(self) -> str:
        """The spec in its canonical text form (names the log's shape)."""
        parts = [] if self.from_ms is None else [f"from={self.from_ms}"]
        if self.amount_factor is not None:
            parts.append(f"amount=x{self.amount_factor!r}")
        if self.country is not None:
            parts.append(f"country={self.country}:{self.country_share!r}")
        if self.fraud_rate is not None:
            parts.append(f"fraud-rate={self.fraud_rate!r}")
        return ",".join(parts)


def _bad(spec: str, why: str) -> DriftSpecError:
    return DriftSpecError(f"bad --drift SPEC {spec!r}: {why}; expected {SPEC_HELP}")


def _number(spec: str, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _bad(spec, f"{key} needs a number, got {text!r}") from None
    if not np.isfinite(value):
        raise _bad(spec, f"{key} needs a finite number")
    return value


def parse_drift_spec(spec: str) -> DriftSpec:
    """Parse SPEC (see the module docstring); DriftSpecError names what is wrong."""
    from app.datagen.config import parse_time_ms

    values: dict[str, object] = {}
    seen: set[str] = set()
    clauses = [c.strip() for c in spec.split(",")]
    if not spec.strip() or any(not c for c in clauses):
        raise _bad(spec, "empty clause")
    for clause in clauses:
        key, eq, text = clause.partition("=")
        key, text = key.strip(), text.strip()
        if not eq or not text:
            raise _bad(spec, f"clause {clause!r} is not KEY=VALUE")
        if key in seen:
            raise _bad(spec, f"{key} given twice")
        seen.add(key)
        if key == "from":
            try:
                values["from_ms"] = parse_time_ms(text)
            except ValueError as exc:
                raise _bad(spec, str(exc)) from None
        elif key == "amount":
            if not text.startswith("x"):
                raise _bad(spec, f"amount needs a factor like x3, got {text!r}")
            factor = _number(spec, key, text[1:])
            if factor <= 0:
                raise _bad(spec, "amount factor must be positive")
            values["amount_factor"] = factor
        elif key == "country":
            code, colon, share_text = text.partition(":")
            if not colon:
                raise _bad(spec, f"country needs CC:SHARE, got {text!r}")
            if code not in {c.code for c in COUNTRIES}:
                known = " ".join(c.code for c in COUNTRIES)
                raise _bad(spec, f"unknown country {code!r} (known: {known})")
            share = _number(spec, key, share_text)
            if not 0.0 < share <= 1.0:
                raise _bad(spec, "country share must be in (0, 1]")
            values["country"], values["country_share"] = code, share
        elif key == "fraud-rate":
            rate = _number(spec, key, text)
            if not 0.0 < rate <= 0.5:
                raise _bad(spec, "fraud-rate must be in (0, 0.5]")
            values["fraud_rate"] = rate
        else:
            raise _bad(spec, f"unknown key {key!r}")
    parsed = DriftSpec(**values)  # type: ignore[arg-type]
    if parsed.amount_factor is None and parsed.country is None and parsed.fraud_rate is None:
        raise _bad(spec, "nothing drifts (give amount, country or fraud-rate)")
    return parsed


def apply_drift(rng: np.random.Generator, txns: TxnColumns, spec: DriftSpec, *, start_ms: int,
                extra_fraud: TxnColumns | None = None) -> TxnColumns:
    """`txns` (sorted by ts) with the spec's changes from its start on, `extra_fraud` added."""
    since = start_ms if spec.from_ms is None else spec.from_ms
    after = txns.ts >= since
    amount, country = txns.amount.copy(), txns.country.copy()
    if spec.amount_factor is not None:
        scaled = np.rint(amount[after] * spec.amount_factor)
        amount[after] = np.clip(scaled, 1, MAX_AMOUNT_MINOR).astype(np.int64)
    if spec.country is not None:
        moved = after & (rng.random(len(txns)) < spec.country_share)
        country[moved] = country_index(spec.country)
    out = TxnColumns(txns.card, txns.ts, amount, txns.merchant, txns.mcc, country, txns.channel,
                     txns.pattern)
    if extra_fraud is not None and len(extra_fraud):
        both = TxnColumns.concat([out, extra_fraud])
        out = both.take(np.argsort(both.ts, kind="stable"))
    return out
