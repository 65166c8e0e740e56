"""Feature-layer benchmark: apply cost vs window density, state bytes, codec cost, offline rate,
and the offline evaluator against DuckDB's plain window query on the same Parquet logs.

Run from the repo root: python -m benchmarks.features_bench [--offline-events 1000000] [--seed 7]
    [--vs-duckdb LOG.parquet ...] [--repeat 2]
Density figures are ratios against the sparsest density measured in the same process; the
DuckDB figures are ratios against DuckDB run side by side (alternating, each run in its own
process so peak memory is its own). No assertions.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import orjson

from app.features.offline import compute_features
from app.features.state import CardState, CompiledCardState
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


def density_figures(rng: random.Random, timed: int,
                    cls: type[CardState] = CardState) -> dict[int, tuple[float, float, float]]:
    """Per-event costs on one card whose 24h window holds ~`density` events (steady state);
    returns density → (apply, to+from bytes, out-of-order apply) seconds."""
    print(f"{cls.__module__}.{cls.__name__}: one card, in-order events, steady state "
          f"(warm-up 2 windows), {timed} timed events")
    print(f"{'events/24h':>10} {'buffered':>8} {'apply µs':>9} {'ratio':>6} {'state B':>9} "
          f"{'B/event':>7} {'to µs':>7} {'from µs':>8} {'to+from':>8} {'ratio':>6} "
          f"{'out-of-order apply µs':>22}")
    base_apply = base_codec = 0.0
    figures: dict[int, tuple[float, float, float]] = {}
    for density in DENSITIES:
        warm = 2 * density + 10
        txns = _txns(warm + timed, density, rng)
        warm_state = cls.empty()
        for t in txns[:warm]:
            warm_state.apply(t, allowed_lateness_ms=L)
        snapshot = warm_state.to_bytes()

        def run_apply(snapshot: bytes = snapshot, txns: list[Transaction] = txns,
                      warm: int = warm) -> float:
            state = cls.from_bytes(snapshot)
            apply = state.apply
            t0 = time.perf_counter()
            for t in txns[warm:]:
                apply(t, allowed_lateness_ms=L)
            return (time.perf_counter() - t0) / timed

        apply_s = _best(run_apply)
        steady = cls.from_bytes(snapshot)
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
                cls.from_bytes(data)
            return (time.perf_counter() - t0) / loops

        to_s, from_s = _best(run_to), _best(run_from)
        codec_s = to_s + from_s
        last = txns[-1]
        late_ok = [Transaction(f"ooo-{k}", "card", last.ts_ms - L // 2 - k, 777, "EUR", "m1",
                               5411, "FR", "pos") for k in range(loops)]

        def run_ooo(data: bytes = data, late_ok: list[Transaction] = late_ok) -> float:
            total = 0.0
            for t in late_ok:
                state = cls.from_bytes(data)
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
        figures[density] = (apply_s, codec_s, ooo_s)
    return figures


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


_WINDOWS = (("w1m", 60_000), ("w5m", 300_000), ("w1h", 3_600_000), ("w24h", 86_400_000))


def duckdb_query(path: str) -> str:
    """The plain windows a data scientist would write: no arrival order, lateness, redelivery."""
    cols = [f"{agg} OVER {name}" for name, _ in _WINDOWS
            for agg in ("count(*)", "sum(amount_minor)", "max(amount_minor)")]
    cols += ["count(DISTINCT merchant_id) OVER w1h", "count(DISTINCT country) OVER w24h",
             "ts_ms - lag(ts_ms) OVER (PARTITION BY card_id ORDER BY ts_ms)"]
    windows = ", ".join(f"{name} AS (PARTITION BY card_id ORDER BY ts_ms RANGE BETWEEN "
                        f"{ms - 1} PRECEDING AND CURRENT ROW)" for name, ms in _WINDOWS)
    return (f"SELECT txn_id, card_id, ts_ms, {', '.join(cols)} "
            f"FROM read_parquet('{path}') WINDOW {windows}")


def _one(engine: str, path: str) -> None:
    """One timed run in this process; prints {seconds, rows, peak_rss_mb} as JSON."""
    rows = 0
    t0 = time.perf_counter()
    if engine == "duckdb":
        import duckdb

        reader = duckdb.connect().execute(duckdb_query(path)).to_arrow_reader(262_144)
        for batch in reader:
            rows += batch.num_rows
    else:
        from app.features.offline import FeaturePass

        run = FeaturePass(path, allowed_lateness_ms=L, now_ms=int(time.time() * 1000))
        for batch in run:
            rows += batch.num_rows
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "rows": rows, "peak_rss_mb": peak}))


def duckdb_figures(paths: list[str], repeat: int) -> None:
    """Our offline evaluator vs DuckDB's window query on each Parquet log, alternating runs."""
    import pyarrow.parquet as pq

    print("\noffline evaluator vs DuckDB plain windows (same file, runs alternate, best of "
          f"{repeat}; events/s over the file's rows)")
    print(f"{'log':>28} {'events':>11} {'ours ev/s':>11} {'ours MB':>8} {'duckdb ev/s':>12} "
          f"{'duckdb MB':>9} {'ratio':>6}")
    for path in paths:
        events = pq.ParquetFile(path).metadata.num_rows
        best: dict[str, dict[str, float]] = {}
        for _ in range(repeat):
            for engine in ("ours", "duckdb"):
                out = subprocess.run([sys.executable, "-m", "benchmarks.features_bench", "--one",
                                      engine, path], check=True, capture_output=True, text=True)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                if engine not in best or got["seconds"] < best[engine]["seconds"]:
                    best[engine] = got
        ours, duck = best["ours"], best["duckdb"]
        print(f"{path[-28:]:>28} {events:>11,} {events / ours['seconds']:>11,.0f} "
              f"{ours['peak_rss_mb']:>8,.0f} {events / duck['seconds']:>12,.0f} "
              f"{duck['peak_rss_mb']:>9,.0f} {duck['seconds'] / ours['seconds']:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline-events", type=int, default=1_000_000)
    parser.add_argument("--timed-events", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--vs-duckdb", nargs="*", default=[], metavar="LOG.parquet",
                        help="Parquet logs (fraudstream generate) to race against DuckDB; "
                        "with this, only that comparison runs.")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--one", nargs=2, metavar=("ENGINE", "LOG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(*args.one)
        return
    if args.vs_duckdb:
        duckdb_figures(args.vs_duckdb, args.repeat)
        return
    python = density_figures(random.Random(args.seed), args.timed_events)
    if CompiledCardState is not None:  # what the stream folds with, against its definition
        compiled = density_figures(random.Random(args.seed), args.timed_events, CompiledCardState)
        print("compiled / Python state, same events:")
        print(f"{'events/24h':>10} {'apply':>7} {'to+from':>8} {'out-of-order':>13}")
        for density, (apply_s, codec_s, ooo_s) in python.items():
            c_apply, c_codec, c_ooo = compiled[density]
            print(f"{density:>10} {c_apply / apply_s:>6.2f}x {c_codec / codec_s:>7.2f}x "
                  f"{c_ooo / ooo_s:>12.2f}x")
    if args.offline_events:
        offline_figures(args.offline_events, random.Random(args.seed))


if __name__ == "__main__":
    main()
