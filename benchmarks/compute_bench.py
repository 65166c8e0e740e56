"""The worker's own work per event, without Kafka: fold, score, card snapshot, by batch size.

    .venv/bin/python benchmarks/compute_bench.py                       # batches 37 and 512
    .venv/bin/python benchmarks/compute_bench.py --batches 8,64,512 --cards 100000
    .venv/bin/python benchmarks/compute_bench.py --batches 150 --cards 50000 --pause-ms 10

What one score-engine batch does between fetch and produce, in this process: the transaction
pipeline (contract, card fold, feature vectors), the scoring stage (model, served rows,
actions, drift, explanations) and the card snapshot the engine takes every ~100 ms of input
(here: every `--snapshot-every` events, default 420 = 100 ms at 4,200 ev/s), on the project's
default model, with the worker's garbage-collector thresholds (app.stream.collector.tune). Card states live in a dict, as if every card were cached. Batch sizes alternate
within one process, `--rounds` times each, on the same generated log; the median round is
printed per batch size.

The figure bounds any worker: one process holds the GIL for this much per event whatever its
Kafka client does, so 1e6 / (µs per event) is the most events per second one worker can serve
with no I/O at all. Compare it with the live-load bench's raw loop (benchmarks/live_load.py):
its rate, and what it costs per event fed live.

`--pause-ms P`: each batch size also runs with the process asleep for P ms after every batch,
as a live worker idles between fetches (alternating with the unpaused runs, same process, same
log), and prints what the same work costs per event then, as a ratio to the unpaused run: on a
shared host the work of a batch that follows an idle gap runs slower (caches and the core were
someone else's meanwhile), whatever the code does.

`--against TREE`: another checkout (its extensions built in place) runs the same log beside
this one, each round in a fresh process per side, the order alternating, each with its own
`one_pass`, model and collector settings: this tree's cost per event as a ratio of that one's
in one run.
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from app.harness.pipeline import lines_of, make_log
from app.kafka.records import SourceMessage
from app.scoring.registry import ModelRegistry
from app.settings import load_settings
from app.stream.engine.pipeline import TransactionPipeline
from app.stream.engine.scoring import ScoringStage

PARTITIONS = 8
ROOT = Path(__file__).resolve().parents[1]
#: One side of an `--against` round, run in the side's own tree: its one_pass on the pickled
#: log, per batch size, as JSON (fold, score, snapshot seconds).
_SIDE = """
import json, pickle, sys
from benchmarks.compute_bench import one_pass
try:
    from app.stream import collector
    collector.tune()
except ImportError:
    pass
lines = pickle.load(open(sys.argv[1], "rb"))
print(json.dumps({b: one_pass(lines, int(b), int(sys.argv[3])) for b in sys.argv[2].split(",")}))
"""


class _Cards(dict):  # type: ignore[type-arg]
    """A CardStore in a dict (app.stream.engine.pipeline.CardStore)."""

    def load(self, card_id: str) -> bytes | None:
        return self.get(card_id)

    def save(self, card_id: str, data: bytes, partition: int) -> None:
        self[card_id] = data


def one_pass(lines: list[bytes], batch: int, snapshot_every: int,
             pause_s: float = 0.0) -> tuple[float, float, float]:
    """(fold, score, snapshot) seconds over `lines` in batches of `batch`, fresh state; with
    `pause_s`, asleep that long after each batch (not counted)."""
    settings = load_settings()
    clock = time.time_ns
    stage = ScoringStage(ModelRegistry.from_settings(settings).load(settings.model_version),
                         settings, lambda: clock() // 1_000_000)
    pipeline = TransactionPipeline(_Cards(), clock_ms=lambda: clock() // 1_000_000,
                                   allowed_lateness_ms=settings.allowed_lateness_ms,
                                   max_message_bytes=settings.max_message_bytes)
    messages = [SourceMessage("transactions", i % PARTITIONS, i // PARTITIONS, None, line)
                for i, line in enumerate(lines)]
    fold = score = snap = 0.0
    since_snapshot = 0
    for start in range(0, len(messages), batch):
        chunk = messages[start:start + batch]
        t0 = time.perf_counter()
        outcome = pipeline.process(chunk, snapshot=False)
        t1 = time.perf_counter()
        stage.run(outcome.scored)
        t2 = time.perf_counter()
        since_snapshot += len(chunk)
        if since_snapshot >= snapshot_every:
            pipeline.snapshot()
            since_snapshot = 0
        t3 = time.perf_counter()
        fold, score, snap = fold + t1 - t0, score + t2 - t1, snap + t3 - t2
        if pause_s:
            time.sleep(pause_s)
    return fold, score, snap


@click.command()
@click.option("--txns", default=100_000, show_default=True)
@click.option("--cards", default=20_000, show_default=True,
              help="Distinct cards in the log (live-load bench: txns / 40, at least 10,000).")
@click.option("--batches", default="37,512", show_default=True,
              help="Batch sizes (37: a live batch at ~4k ev/s; 512: the backlog's max_batch).")
@click.option("--snapshot-every", default=420, show_default=True,
              help="Events between card snapshots.")
@click.option("--rounds", default=3, show_default=True)
@click.option("--pause-ms", default=0.0, show_default=True,
              help="Also run each batch size asleep this long after every batch (0: not).")
@click.option("--against", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Another checkout run beside this one on the same log (see the module).")
def main(txns: int, cards: int, batches: str, snapshot_every: int, rounds: int,
         pause_ms: float, against: Path | None) -> None:
    lines = lines_of(make_log(cards=cards, txns=txns, seed=5))
    if against is not None:
        compare(lines, against, batches, snapshot_every, rounds)
        return
    from app.stream import collector

    collector.tune()  # the worker's collector thresholds (app/stream/collector.py), as it runs
    sizes = [int(b) for b in batches.split(",")]
    pauses = [0.0, pause_ms / 1000] if pause_ms > 0 else [0.0]
    runs: dict[tuple[int, float], list[tuple[float, float, float]]] = {
        (b, p): [] for b in sizes for p in pauses}
    for _ in range(rounds):
        for b in sizes:
            for p in pauses:
                runs[(b, p)].append(one_pass(lines, b, snapshot_every, p))
    n = len(lines)
    print(f"{n:,} events over {cards:,} cards, snapshot every {snapshot_every} events; "
          f"median of {rounds} rounds, µs per event:")
    print(f"{'batch':>6s} {'pause':>6s} {'fold':>7s} {'score':>7s} {'snapshot':>9s} "
          f"{'total':>7s} {'one-core ceiling':>17s} {'vs no pause':>12s}")
    for b in sizes:
        base = 0.0
        for p in pauses:
            fold, score, snap = (statistics.median(r[i] for r in runs[(b, p)]) * 1e6 / n
                                 for i in range(3))
            total = fold + score + snap
            base = base or total
            print(f"{b:6d} {p * 1000:4.0f}ms {fold:7.1f} {score:7.1f} {snap:9.1f} {total:7.1f} "
                  f"{1e6 / total:11,.0f} ev/s {total / base:11.2f}×")


def _side(tree: Path, log: str, batches: str, snapshot_every: int) -> dict[str, list[float]]:
    env = {k: v for k, v in os.environ.items() if k != "FRAUDSTREAM_MODEL_DIR"}
    env["PYTHONPATH"] = str(tree)
    done = subprocess.run([sys.executable, "-c", _SIDE, log, batches, str(snapshot_every)],  # noqa: S603
                          cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(lines: list[bytes], against: Path, batches: str, snapshot_every: int,
            rounds: int) -> None:
    """This tree and `against` on `lines`, `rounds` times, the order alternating."""
    n = len(lines)
    runs: dict[Path, list[dict[str, list[float]]]] = {ROOT: [], against: []}
    with tempfile.NamedTemporaryFile(suffix=".pickle") as log:
        pickle.dump(lines, log)
        log.flush()
        for r in range(rounds):
            for tree in ((ROOT, against) if r % 2 == 0 else (against, ROOT)):
                runs[tree].append(_side(tree, log.name, batches, snapshot_every))
    print(f"{n:,} events, snapshot every {snapshot_every} events; {rounds} rounds, each side "
          f"in its own process, the order alternating; µs per event (fold + score + snapshot):")
    for b in batches.split(","):
        mine = [sum(r[b]) * 1e6 / n for r in runs[ROOT]]
        theirs = [sum(r[b]) * 1e6 / n for r in runs[against]]
        pairs = sorted(m / t for m, t in zip(mine, theirs, strict=True))
        print(f"  batch {b:>4s}: this {statistics.median(mine):6.1f}  against "
              f"{statistics.median(theirs):6.1f}  ratio of medians "
              f"{statistics.median(mine) / statistics.median(theirs):.3f}  (per round "
              f"{', '.join(f'{p:.2f}' for p in pairs)})")


if __name__ == "__main__":
    main()
