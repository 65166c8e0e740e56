"""Card restore path alone: the current restore against the previous path, same run, same log.

    .venv/bin/python benchmarks/restore_bench.py --records 1300000 --cards 1000000

One card changelog (8 partitions) is produced once: --cards distinct cards, then later records
of random cards up to --records (a changelog the cleaner has not wholly compacted), values
sized like real card states (median ~450 bytes, a long tail). Each variant restores it from
nothing into a fresh RocksDB card store (app.stream.state.carddb, through a Faust table), --rounds
times, the variants taking turns; the best rate of each is kept:

- previous: every fetch fenced with a store multi-get, writes through the WAL, records read by
  aiokafka's consumer (the former restore path, rebuilt by configuration);
- current: `ChangelogRestorer` as the worker builds it.

Printed: records/s of each and current / previous. The worker's own figure (with Faust's
start-up beside it) is `benchmarks/state_bench.py`'s cold restore rate. The topic is deleted
afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import struct
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.security.kafka import kafka_client_kwargs
from app.settings import load_settings
from app.stream.state.cardstore import card_table
from app.stream.state.restore import ChangelogRestorer

PARTITIONS = 8
_POSITION = struct.Struct("<iq")


class Previous:
    """The card store as the previous restore used it: fenced by look-ups, writes logged."""

    offsets_cover_records = False

    def __init__(self, db: Any) -> None:
        self.db = db

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return self.db.get_many(keys)  # type: ignore[no-any-return]

    def write(self, records: Iterable[tuple[bytes, bytes]], offsets: Mapping[int, int], *,
              logged: bool = True) -> None:
        self.db.write(records, offsets)

    def flush(self) -> None:
        self.db.flush()

    def drop(self) -> None:
        self.db.drop()


async def produce(client: dict[str, Any], topic: str, records: int, cards: int) -> None:
    admin = AIOKafkaAdminClient(**client)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    rng = random.Random(26)
    blob = rng.randbytes(1 << 16)
    producer = AIOKafkaProducer(**client, acks="all", linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    try:
        pending = []
        for i in range(records):
            card = i if i < cards else rng.randrange(cards)
            partition = card % PARTITIONS
            size = min(int(200 + rng.expovariate(1 / 370)), 12_000)
            start = rng.randrange(len(blob) - size)
            value = _POSITION.pack(partition, i) + blob[start:start + size]
            pending.append(await producer.send(topic, value, key=b"card-%09d" % card,
                                               partition=partition))
            if len(pending) >= 50_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def restore(variant: str, client: dict[str, Any], topic: str, tmp: Path) -> float:
    datadir = tmp / f"{variant}-{uuid.uuid4().hex[:6]}"
    app = faust.App(f"restore-bench-{variant}", datadir=str(datadir), autodiscover=False)
    db = card_table(app, PARTITIONS, store="rocksdb://").data
    target = Previous(db) if variant == "previous" else db
    restorer = ChangelogRestorer(lambda: client, raw_fetch=variant != "previous")
    t0 = time.perf_counter()
    asyncio.run(restorer.restore(topic, dict.fromkeys(range(PARTITIONS), -1), target))
    took = time.perf_counter() - t0
    db.close()
    shutil.rmtree(datadir, ignore_errors=True)
    return restorer.restored / took


async def drop(client: dict[str, Any], topic: str) -> None:
    admin = AIOKafkaAdminClient(**client)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_300_000)
    parser.add_argument("--cards", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    client = kafka_client_kwargs(load_settings())
    topic = f"restore-bench-{uuid.uuid4().hex[:8]}-card_state-changelog"
    tmp = Path(tempfile.mkdtemp(prefix="restore-bench-"))
    try:
        t0 = time.monotonic()
        asyncio.run(produce(client, topic, args.records, args.cards))
        print(f"changelog: {args.records:,} records of {args.cards:,} cards "
              f"(produced in {time.monotonic() - t0:.0f}s)", flush=True)
        best = {"previous": 0.0, "current": 0.0}
        for round_ in range(args.rounds):
            for variant in best:
                rate = restore(variant, client, topic, tmp)
                best[variant] = max(best[variant], rate)
                print(f"round {round_ + 1} {variant}: {rate:,.0f} records/s", flush=True)
        print(f"previous {best['previous']:,.0f} records/s, current {best['current']:,.0f} "
              f"records/s: current / previous {best['current'] / best['previous']:.2f}")
    finally:
        asyncio.run(drop(client, topic))
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
