"""Card state memory at scale: the worker's decoded states and their changelog records, per card.

    .venv/bin/python benchmarks/card_memory.py --cards 1000000 --txns 4000000 --days 30

A generated log (the synthetic generator: its cards' spending over `--days`) folded card by card
through the compiled card state (app.features._state, what a worker caches), then: events held
per card (the windows' horizon decides it: 30 days + lateness now), the serialized record per
card (what the changelog and the RocksDB store hold), and the RSS the decoded states add per
card. Run it on two checkouts for a ratio (PYTHONPATH selects the code; the log is the same).
"""

from __future__ import annotations

import argparse
import gc
import resource
import time

from app.datagen.config import GeneratorConfig
from app.datagen.generator import generate_log
from app.features.state import StreamCardState
from app.transactions.contract import parse_transaction


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cards", type=int, default=1_000_000)
    ap.add_argument("--txns", type=int, default=4_000_000)
    ap.add_argument("--days", type=int, default=30)
    args = ap.parse_args()
    log = generate_log(GeneratorConfig(cards=args.cards, txns=args.txns, days=args.days,
                                       seed=3))
    lines = [line for line, kind in log.iter_lines() if kind == "valid"]
    now = 2**62 // 4
    del log
    gc.collect()
    before = _rss_mb()
    states: dict[str, StreamCardState] = {}
    began = time.perf_counter()
    for raw in lines:
        txn = parse_transaction(raw, now_ms=now)
        state = states.get(txn.card_id)
        if state is None:
            state = states[txn.card_id] = StreamCardState.empty()
        state.apply(txn, allowed_lateness_ms=300_000)
    folded = time.perf_counter() - began
    del lines
    gc.collect()
    held = _rss_mb() - before
    events = sum(len(s) for s in states.values())
    record = sum(len(s.to_bytes()) for s in states.values())
    n = len(states)
    print(f"{n:,} cards, {events:,} events held ({events / n:.2f} per card), folded in "
          f"{folded:.0f} s")
    print(f"decoded states: {held * 2**20 / n:,.0f} B of RSS per card ({held:,.0f} MB); "
          f"serialized record: {record / n:,.0f} B per card ({record / 2**20:,.0f} MB)")


if __name__ == "__main__":
    main()
