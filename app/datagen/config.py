"""The generator's configuration: one frozen object that fully determines a generated log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from app.datagen.drift import DriftSpec
from app.transactions.contract import DEFAULT_MAX_BYTES, MIN_TS_MS

DAY_MS: Final = 86_400_000
#: 2026-01-01T00:00:00Z
DEFAULT_START_MS: Final = 1_767_225_600_000
#: The offset trick that finds late events needs card * 2**40 to fit in int64.
MAX_CARDS: Final = 5_000_000
#: ...and the event times to span less than 2**40 ms; ten years keeps well inside that.
MAX_DAYS: Final = 3650
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True, slots=True)
class GeneratorConfig:
    """Everything a generated log depends on: same config (seed included) → same bytes."""

    cards: int = 10_000
    txns: int = 100_000
    seed: int = 0
    start_ms: int = DEFAULT_START_MS
    days: int = 14
    #: Fraction of transactions displaced in file order (most within the allowed lateness).
    out_of_order: float = 0.0
    #: Fraction of transactions re-emitted a second time, byte-identical, a little later.
    redelivery: float = 0.0
    #: Bad messages added, as a fraction of the transaction count.
    malformed: float = 0.0
    #: Share of transactions that are labelled fraud (approximate: whole incidents are kept).
    fraud_rate: float = 0.015
    #: Merchants in the population; None sizes it from the card count.
    merchants: int | None = None
    allowed_lateness_ms: int = 300_000
    #: Size limit the oversized bad messages must exceed.
    max_message_bytes: int = DEFAULT_MAX_BYTES
    #: The validator's clock the bad messages are built against; None: end of data + 1 day.
    now_ms: int | None = None
    #: Drift injected from a point in event time (`generate --drift`); None: none.
    drift: DriftSpec | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.cards <= MAX_CARDS:
            raise ValueError(f"cards must be in [1, {MAX_CARDS}], got {self.cards}")
        if self.txns < 1:
            raise ValueError(f"txns must be at least 1, got {self.txns}")
        if self.seed < 0:
            raise ValueError(f"seed must be non-negative, got {self.seed}")
        if not 1 <= self.days <= MAX_DAYS:
            raise ValueError(f"days must be in [1, {MAX_DAYS}], got {self.days}")
        if self.start_ms < MIN_TS_MS:
            raise ValueError(f"start must be at or after 2000-01-01, got {self.start_ms}")
        for name in ("out_of_order", "redelivery", "malformed"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a fraction in [0, 1], got {value}")
        if not 0.0 <= self.fraud_rate <= 0.5:
            raise ValueError(f"fraud_rate must be in [0, 0.5], got {self.fraud_rate}")
        if self.merchants is not None and self.merchants < 1:
            raise ValueError(f"merchants must be positive, got {self.merchants}")
        if self.allowed_lateness_ms < 0:
            raise ValueError("allowed_lateness_ms must be non-negative")
        since = None if self.drift is None else self.drift.from_ms
        if since is not None and not self.start_ms <= since < self.end_ms:
            raise ValueError(f"--drift from={since} is outside the log's event time "
                             f"[{self.start_ms}, {self.end_ms})")

    @property
    def end_ms(self) -> int:
        """Exclusive end of the event-time range: start + days."""
        return self.start_ms + self.days * DAY_MS

    @property
    def validation_now_ms(self) -> int:
        """The clock every valid line passes the contract with (default: end of data + 1 day)."""
        return self.end_ms + DAY_MS if self.now_ms is None else self.now_ms


def parse_time_ms(text: str) -> int:
    """An ISO-8601 date or datetime (naive means UTC), or integer ms since epoch, as ms."""
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO date/datetime nor milliseconds since epoch"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)
