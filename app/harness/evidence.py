"""Evidence a fault scenario reads after the run: watchdog repairs, event → effect latency."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import orjson

from app.harness.pipeline import read
from app.kafka import topics
from app.settings import Settings

#: What app.stream.kafka.watchdog logs for every partition it re-reads.
WATCHDOG_LINE = "was read but never processed; re-reading from it"


def watchdog_repairs(logs: Iterable[Path]) -> int:
    """Partitions the commit watchdog re-read, over every worker's log (killed ones included:
    their /metrics are gone, their logs are not)."""
    return sum(path.read_text(errors="replace").count(WATCHDOG_LINE)
               for path in logs if path.exists())


def event_to_effect_ms(settings: Settings, ledger: Sequence[Mapping[str, str]]) -> list[float]:
    """For every effect: its transaction's broker timestamp → the effect applied (ms). A
    transaction the log sent twice counts from its first copy."""
    appended: dict[str, int] = {}
    for record in read(settings, topics.TRANSACTIONS):
        try:
            txn_id = orjson.loads(record.value)["txn_id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue  # a malformed line: it has no effect
        if isinstance(txn_id, str):
            appended[txn_id] = min(appended.get(txn_id, record.timestamp_ms), record.timestamp_ms)
    return [float(int(e["applied_at_ms"]) - appended[e["txn_id"]])
            for e in ledger if e.get("txn_id") in appended]


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")
