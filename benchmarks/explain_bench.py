"""The CPU cost of explanations in the worker's scoring stage, with and without, in one run.

    .venv/bin/python benchmarks/explain_bench.py                 # the demo's mix, 50k events
    .venv/bin/python benchmarks/explain_bench.py --txns 20000 --batch 256

The demo's generator settings (500 cards per 10k transactions, 2 % malformed) give the demo's
action rate. The offline fold computes every accepted row's features once; then the worker's
`ScoringStage.run` (features matrix, scoring, served rows, policy, actions as JSON) runs over
the same rows in batches of --batch, alternately with explanations on and off (who goes first
alternates too), --rounds times each, on the CPU provider. CPU is this process's `time.process_time` around the stage calls
only. Printed: the action rate, µs of CPU per event with and without (median of the rounds),
the difference, and that difference as a share of the whole worker's CPU per event (--worker-us,
default: the median of docs/benchmarks.md's three pairs).
"""

from __future__ import annotations

import statistics
import time

import click
import orjson

from app.datagen.config import GeneratorConfig
from app.datagen.generator import generate_log
from app.features.declaration import FEATURE_NAMES
from app.features.offline import compute_features
from app.kafka.records import SourceMessage
from app.scoring.registry import ModelRegistry
from app.settings import load_settings
from app.stream.engine.pipeline import Scored
from app.stream.engine.scoring import ScoringStage
from app.transactions.contract import ContractError, parse_transaction


@click.command()
@click.option("--txns", default=50_000, show_default=True)
@click.option("--batch", default=64, show_default=True, help="Rows per stage call.")
@click.option("--rounds", default=5, show_default=True)
@click.option("--worker-us", default=35.4, show_default=True,
              help="The whole worker's CPU µs per event, for the share.")
def main(txns: int, batch: int, rounds: int, worker_us: float) -> None:
    settings = load_settings()
    now_ms = time.time_ns() // 1_000_000 + 3_600_000
    log = generate_log(GeneratorConfig(cards=max(1, txns // 20), txns=txns, seed=7,
                                       malformed=0.02, now_ms=now_ms))
    lines = [line for line, _ in log.iter_lines()]
    offline = compute_features(lines, allowed_lateness_ms=settings.allowed_lateness_ms,
                               now_ms=now_ms)
    txn_by_id = {}
    for line in lines:
        try:
            txn = parse_transaction(line, now_ms=now_ms)
        except ContractError:
            continue
        txn_by_id.setdefault(txn.txn_id, txn)
    table = offline.table
    values = list(zip(*(table.column(n).to_pylist() for n in FEATURE_NAMES), strict=True))
    source = SourceMessage("transactions", 0, 0, None, b"")
    scored = [Scored(source, txn_by_id[t], tuple(v), False)
              for t, v in zip(table.column("txn_id").to_pylist(), values, strict=True)]
    model = ModelRegistry(settings.model_dir, device="cpu").load(settings.model_version)
    stages = {on: ScoringStage(model, settings.replace(explain=on), lambda: now_ms)
              for on in (True, False)}
    batches = [scored[i:i + batch] for i in range(0, len(scored), batch)]
    cpu: dict[bool, list[float]] = {True: [], False: []}
    actions = explained_rows = 0
    for round_ in range(rounds):
        for on in ((True, False) if round_ % 2 else (False, True)):  # alternate who goes first
            stage = stages[on]
            t0 = time.process_time()
            out = [stage.run(b) for b in batches]
            cpu[on].append(time.process_time() - t0)
            if on:
                records = [r for chunk in out for r in chunk if r.topic == "actions"]
                actions = len(records)
                decoded = [orjson.loads(r.value) for r in records]
                assert all(len(a["explanation"]) >= 3 for a in decoded)
                explained_rows = len({a["txn_id"] for a in decoded})
    n = len(scored)
    with_us = statistics.median(cpu[True]) / n * 1e6
    without_us = statistics.median(cpu[False]) / n * 1e6
    print(f"events scored        {n:,} in batches of {batch}, {rounds} rounds each way")
    print(f"actions              {actions:,} ({actions / n:.2%} of events), "
          f"from {explained_rows:,} transactions ({explained_rows / n:.2%}), each explained")
    print(f"stage CPU µs/event   with {with_us:.2f}, without {without_us:.2f}, "
          f"+{with_us - without_us:.2f} ({(with_us - without_us) / without_us:+.1%} of the stage)")
    print(f"share of the worker  +{(with_us - without_us) / worker_us:.1%} of {worker_us} µs/event")


if __name__ == "__main__":
    main()
