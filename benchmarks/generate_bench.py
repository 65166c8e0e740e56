"""Benchmark: generator throughput against writing the same number of preformatted lines."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from app.datagen.config import GeneratorConfig
from app.datagen.generator import generate_log
from app.datagen.writer import write_jsonl, write_labels

#: A typical generated line, written repeatedly as the baseline's fixed content.
_FIXED_LINE = (
    b'{"txn_id":"t1a2b3c4d-000000001","card_id":"c0001234","ts_ms":1767225600000,'
    b'"amount_minor":1250,"currency":"EUR","merchant_id":"m0000123","mcc":5411,'
    b'"country":"DE","channel":"pos"}\n'
)


def baseline(path: Path, lines: int) -> float:
    """Seconds to write `lines` fixed preformatted lines in 64k-line chunks (raw write cost)."""
    chunk = _FIXED_LINE * 65_536
    began = time.perf_counter()
    with open(path, "wb") as f:
        left = lines
        while left > 0:
            n = min(left, 65_536)
            f.write(chunk if n == 65_536 else _FIXED_LINE * n)
            left -= n
    return time.perf_counter() - began


def generate(directory: Path, txns: int, seed: int) -> tuple[float, float, int]:
    """(generate seconds, write seconds, lines) for one realistic noisy log."""
    config = GeneratorConfig(cards=max(txns // 100, 10), txns=txns, seed=seed, out_of_order=0.02,
                             redelivery=0.01, malformed=0.01)
    began = time.perf_counter()
    log = generate_log(config)
    built = time.perf_counter()
    write_jsonl(log, directory / "txns.jsonl")
    write_labels(log, directory / "labels.jsonl")
    return built - began, time.perf_counter() - built, len(log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fraudstream-bench-") as tmp:
        directory = Path(tmp)
        print(f"{'txns':>10} {'lines':>10} {'gen s':>7} {'write s':>8} {'total s':>8} "
              f"{'lines/s':>10} {'baseline lines/s':>17} {'ratio':>6}")
        for txns in args.sizes:
            gen_s, write_s, lines = generate(directory, txns, args.seed)
            base_s = min(baseline(directory / "baseline.jsonl", lines) for _ in range(2))
            total = gen_s + write_s
            rate, base_rate = lines / total, lines / base_s
            print(f"{txns:>10,} {lines:>10,} {gen_s:>7.2f} {write_s:>8.2f} {total:>8.2f} "
                  f"{rate:>10,.0f} {base_rate:>17,.0f} {rate / base_rate:>6.3f}")


if __name__ == "__main__":
    main()
