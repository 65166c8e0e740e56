"""Feature-layer benchmark: apply cost vs window density, state bytes, codec cost, offline rate.

Run from the repo root: python -m benchmarks.features_bench [--offline-events 1000000] [--seed 7]
Figures are ratios against the sparsest density measured in the same process; no assertions.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

import orjson

from app.features.offline import compute_features
from app.features.state import CardState
from app.transactions.contract import ContractError, Transaction, parse_transaction

DAY = 86_400_000
L = 300_000
BASE = 1_700_000_000_000
DENSITIES = (10, 100, 1000)  # events per 24h window


def _txns(n: int, density: int, rng: random.Random, card: str = "card") -> list[Transaction]:
    step = DAY // density
    return [Transaction(f"{card}-{i}", card, BASE + i * step + rng.randrange(step // 2),
                        rng.randrange(100, 50_000), "EUR", f"m{rng.randrange(40)}",
                        5411, rng.choice(("FR", "DE", "US", "GB")), "pos") for i in range(n)]


def _best(fn: Callable[[], float], repeat: int = 3) -> float:
    return min(fn() for _ in range(repeat))


def density_figures(rng: random.Random, timed: int) -> None:
    """Per-event costs on one card whose 24h window holds ~`density` events (steady state)."""
    print(f"one card, in-order events, steady state (warm-up 2 windows), {timed} timed events")
    print(f"{'events/24h':>10} {'buffered':>8} {'apply µs':>9} {'ratio':>6} {'state B':>9} "
          f"{'B/event':>7} {'to µs':>7} {'from µs':>8} {'to+from':>8} {'ratio':>6} "
          f"{'out-of-order apply µs':>22}")
    base_apply = base_codec = 0.0
    for density in DENSITIES:
        warm = 2 * density + 10
        txns = _txns(warm + timed, density, rng)
        warm_state = CardState.empty()
        for t in txns[:warm]:
            warm_state.apply(t, allowed_lateness_ms=L)
        snapshot = warm_state.to_bytes()

        def run_apply(snapshot: bytes = snapshot, txns: list[Transaction] = txns,
                      warm: int = warm) -> float:
            state = CardState.from_bytes(snapshot)
            apply = state.apply
            t0 = time.perf_counter()
            for t in txns[warm:]:
                apply(t, allowed_lateness_ms=L)
            return (time.perf_counter() - t0) / timed

        apply_s = _best(run_apply)
        steady = CardState.from_bytes(snapshot)
        for t in txns[warm:]:
            steady.apply(t, allowed_lateness_ms=L)
        data = steady.to_bytes()
        loops = max(20, min(2_000, 200_000 // density))

        def run_to(state: CardState = steady, loops: int = loops) -> float:
            t0 = time.perf_counter()
            for _ in range(loops):
                state.to_bytes()
            return (time.perf_counter() - t0) / loops

        def run_from(data: bytes = data, loops: int = loops) -> float:
            t0 = time.perf_counter()
            for _ in range(loops):
                CardState.from_bytes(data)
            return (time.perf_counter() - t0) / loops

        to_s, from_s = _best(run_to), _best(run_from)
        codec_s = to_s + from_s
        last = txns[-1]
        late_ok = [Transaction(f"ooo-{k}", "card", last.ts_ms - L // 2 - k, 777, "EUR", "m1",
                               5411, "FR", "pos") for k in range(loops)]

        def run_ooo(data: bytes = data, late_ok: list[Transaction] = late_ok) -> float:
            total = 0.0
            for t in late_ok:
                state = CardState.from_bytes(data)
                t0 = time.perf_counter()
                state.apply(t, allowed_lateness_ms=L)
                total += time.perf_counter() - t0
            return total / len(late_ok)

        ooo_s = _best(run_ooo)
        base_apply = base_apply or apply_s
        base_codec = base_codec or codec_s
        print(f"{density:>10} {len(steady):>8} {apply_s * 1e6:>9.2f} {apply_s / base_apply:>6.2f} "
              f"{len(data):>9,} {len(data) / len(steady):>7.0f} {to_s * 1e6:>7.1f} {from_s * 1e6:>8.1f} "
              f"{codec_s * 1e6:>8.1f} "
              f"{codec_s / base_codec:>6.1f} {ooo_s * 1e6:>22.1f}")


def synthetic_log(n: int, rng: random.Random) -> list[bytes]:
    """~n messages over 30 days and 20k cards (busiest ~1,200/day, most a few a day).

    2% displaced back within L, 0.1% displaced past it (late), 0.5% sent twice, 0.2% broken.
    """
    cards = [f"card{k:05d}" for k in range(20_000)]
    out: list[bytes] = []
    ts = BASE
    step = 30 * DAY // n
    for i in range(n):
        ts += rng.randrange(2 * step + 1)
        shift = rng.random()
        event_ts = ts - (rng.randrange(L) if shift < 0.02 else
                         rng.randrange(2 * L, 10 * L) if shift < 0.021 else 0)
        card = cards[int(rng.random() ** 3 * len(cards))]
        msg = orjson.dumps({
            "txn_id": f"t{i}", "card_id": card, "ts_ms": event_ts,
            "amount_minor": rng.randrange(100, 200_000), "currency": "EUR",
            "merchant_id": f"m{rng.randrange(5_000)}", "mcc": 5411,
            "country": rng.choice(("FR", "DE", "US", "GB", "ES")), "channel": "pos"})
        r = rng.random()
        if r < 0.002:
            msg = msg[:-7]
        out.append(msg)
        if r > 0.995:
            out.append(msg)
    return out


def offline_figures(n: int, rng: random.Random) -> None:
    """Offline evaluator throughput on a synthetic log, with the validation cost alone."""
    t0 = time.perf_counter()
    lines = synthetic_log(n, rng)
    print(f"\noffline: synthetic log of {len(lines):,} messages built in "
          f"{time.perf_counter() - t0:.1f}s")
    now = BASE + 60 * DAY
    t0 = time.perf_counter()
    for raw in lines:
        try:
            parse_transaction(raw, now_ms=now)
        except ContractError:
            pass
    parse_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = compute_features(lines, allowed_lateness_ms=L, now_ms=now)
    total_s = time.perf_counter() - t0
    print(f"  {result.summary()}")
    print(f"  compute_features: {total_s:.1f}s = {len(lines) / total_s:,.0f} events/s "
          f"({total_s / len(lines) * 1e6:.1f} µs/event)")
    print(f"  of which contract validation alone: {parse_s:.1f}s "
          f"({parse_s / total_s:.0%} of the total)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline-events", type=int, default=1_000_000)
    parser.add_argument("--timed-events", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    density_figures(rng, args.timed_events)
    if args.offline_events:
        offline_figures(args.offline_events, rng)


if __name__ == "__main__":
    main()
