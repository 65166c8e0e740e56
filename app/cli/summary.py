"""The demo's summary in a dozen short lines (pure: counts in, text out, no I/O)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.features.declaration import MONEY_FEATURE_NAMES
from app.kafka import topics
from app.transactions.money import decimals, units

#: Frozen cards listed by name; the rest are counted (all of them are in frozen-cards.jsonl).
FROZEN_ROWS = 3
#: Width the lines are built for (one 80-column terminal).
WIDTH = 80
#: The label column.
INDENT = " " * 13


@dataclass(frozen=True, slots=True)
class DemoSummary:
    """What one demo run did, as lines to print, and whether every message is accounted for."""

    lines: list[str]
    verdict: list[str]  # the accounting lines, shown green when balanced, red otherwise
    balanced: bool


def _fit(label: str, items: Sequence[str], *, sep: str = ", ", more: str = "+{} more") -> str:
    """`label` and as many `items` as fit in WIDTH, then how many were left out."""
    line = f"{label:<13}"
    for i, item in enumerate(items):
        rest = len(items) - i - 1
        tail = f"{sep}{more.format(rest)}" if rest else ""
        candidate = line + (sep if i else "") + item
        if len(candidate + tail) > WIDTH and i:
            return line + sep + more.format(len(items) - i)
        line = candidate
    return line


def _number(value: float) -> str:
    """A feature value in a few characters (1.23M, 64.2k, 7.25): k is a thousand."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value}" if isinstance(value, int) else f"{value:.3g}"


def _money(minor: float, currency: str | None) -> str:
    """An amount in minor units as its currency's units with the code (641.72 EUR, 12.3k USD);
    without a currency, said to be in minor units."""
    if currency is None:
        return f"{_number(minor)} minor units"
    amount = units(minor, currency)
    shown = _number(amount) if abs(amount) >= 1e3 else f"{amount:.{decimals(currency)}f}"
    return f"{shown} {currency}"


def _value(name: str, value: float, currency: str | None) -> str:
    return _money(value, currency) if name in MONEY_FEATURE_NAMES else _number(value)


def currencies_of(lines: Iterable[bytes], txn_ids: Collection[str]) -> dict[str, str]:
    """The currency of each of `txn_ids` in a transaction log's lines (bad lines skipped)."""
    import orjson

    found: dict[str, str] = {}
    for line in lines:
        try:
            txn = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(txn, dict):
            continue
        txn_id, currency = txn.get("txn_id"), txn.get("currency")
        if isinstance(txn_id, str) and txn_id in txn_ids and isinstance(currency, str):
            found[txn_id] = currency
    return found


def summarise(prefix: str, sizes: Mapping[str, int], dlq_reasons: Counter[str],
              action_types: Sequence[tuple[str, str]], frozen: Sequence[Mapping[str, Any]],
              frozen_file: str, currencies: Mapping[str, str] | None = None) -> DemoSummary:
    """The summary of a run on topics `prefix`*.

    `sizes`: messages per full topic name; `dlq_reasons`: dead letters by reason code;
    `action_types`: (idempotency key, type) of every message on the actions topic, copies
    included; `frozen`: the action service's view of every card the run decided to freeze;
    `currencies`: the currency of each freezing transaction (txn_id -> ISO 4217 code), the
    unit its money features are shown in.
    """
    def size(logical: str) -> int:
        return sizes.get(f"{prefix}{logical}", 0)

    source, served = size(topics.TRANSACTIONS), size(topics.FEATURES_SERVED)
    late, dlq = size(topics.TRANSACTIONS_LATE), size(topics.TRANSACTIONS_DLQ)
    lines = [
        f"{'topics':<13}{topics.TRANSACTIONS} {source:,} · {topics.FEATURES_SERVED} {served:,} · "
        f"late {late:,} · dlq {dlq:,}",
        f"{INDENT}{topics.ACTIONS} {size(topics.ACTIONS):,} · "
        f"{topics.ACTIONS_DLQ} {size(topics.ACTIONS_DLQ):,}",
    ]
    reasons = [f"{reason} {n}" for reason, n in dlq_reasons.most_common()]
    lines.append(_fit("dlq reasons", reasons) if reasons else f"{'dlq reasons':<13}none")

    unique = dict(action_types)
    by_type = Counter(unique.values())
    freezes, alerts = by_type.get("freeze_card", 0), by_type.get("alert_customer", 0)
    copies = len(action_types) - len(unique)
    lines.append(f"{'actions':<13}{freezes:,} freeze_card, {alerts:,} alert_customer; "
                 f"{copies:,} re-sent cop{'y' if copies == 1 else 'ies'} absorbed")

    head = f"{'frozen':<13}{len(frozen):,} card{'' if len(frozen) == 1 else 's'}"
    if freezes > len(frozen):
        lines.append(f"{head} ({freezes:,} freeze decisions: the first freezes a card,")
        lines.append(f"{INDENT}the later ones find it frozen already)")
    else:
        lines.append(head)
    for view in frozen[:FROZEN_ROWS]:
        n_alerts = view.get("alerts_total")
        if n_alerts is None:
            n_alerts = len(view.get("alerts") or [])
        lines.append(f"{INDENT}{view['card_id']}  {view['status']} by {view.get('txn_id')}, "
                     f"{n_alerts} alert{'' if n_alerts == 1 else 's'}")
        explanation = view.get("explanation") or []
        if explanation:  # the freeze's top features: value and contribution to the score
            currency = (currencies or {}).get(str(view.get("txn_id")))
            lines.append(_fit("  why", [
                f"{c['name']}={_value(c['name'], c['value'], currency)} "
                f"{c['contribution']:+.2f}" for c in explanation]))
    if frozen:
        shown = min(len(frozen), FROZEN_ROWS)
        lines.append(f"{INDENT}{'all' if shown == len(frozen) else f'{shown} of'} "
                     f"{len(frozen):,} in {frozen_file}")

    all_frozen = all(v.get("status") == "frozen" for v in frozen)
    accounted = served + late + dlq == source
    mark = {True: "✓", False: "✗"}
    verdict = [
        f"{'balance':<13}{source:,} in = {served:,} served + {late:,} late + {dlq:,} "
        f"dead-lettered {mark[accounted]}",
        f"{INDENT}every card decided frozen is frozen {mark[all_frozen]}",
    ]
    return DemoSummary(lines, verdict, accounted and all_frozen)
