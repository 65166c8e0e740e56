"""The handbook benchmark's baseline week through the live pipeline (`handbook_bench --live`).

The model of the baseline week is trained as `fraudstream model train --algorithm lgbm` does
(trainer.train_model: the training week, then the test week as its evaluation days) into a
model directory. The test week with the 30 days before it (the card windows' history) and the
labels of the 51 days before its start (the merchant windows' reach of 37 days, and the 14 days
before those in which a card's fraud explains another: each label as the book knows it, 7 days
after its transaction) are then:
- scored offline by `fraudstream score`'s oracle (run_oracle) with those labels;
- replayed through Kafka into a real worker on the local stack, the labels first.
The served rows must equal the offline rows: the same features (audit-skew with the labels: 0)
and the same scores; the figures over the test rows are then the same by construction, and
both are printed.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from dataclasses import asdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from app.features.declaration import FEATURE_NAMES
from app.quality import handbook as hb
from app.scoring.gbt import GbtParams

_HISTORY_DAYS = 30
_LABEL_REACH_DAYS = 37 + 14


def _ms(d: date) -> int:
    return (d - date(1970, 1, 1)).days * hb.DAY_MS


def _training_table(t: Any, rows: np.ndarray) -> pa.Table:  # noqa: ANN401 - the bench's Table
    from app.features.training_set import COLUMNS

    ts = (t.days[rows] + (hb.DATA_START - date(1970, 1, 1)).days) * hb.DAY_MS
    cols = {"txn_id": pa.array(t.txn_ids[rows].tolist()), "ts_ms": pa.array(ts, pa.int64()),
            "card_id": pa.array(t.cards[rows].tolist())}
    for j, name in enumerate(FEATURE_NAMES):
        cols[name] = pa.array(t.matrix[rows, j].astype(np.float64))
    cols["label"] = pa.array(t.fraud[rows], pa.int64())
    return pa.table({c: cols[c] for c in COLUMNS})


def replay_baseline(t: Any, split: hb.Split, params: GbtParams, txns: Path,  # noqa: ANN401
                    labels: Path) -> dict[str, Any]:
    from app.features.merchant import MerchantTable
    from app.harness.pipeline import (
        audit_served,
        drop_quietly,
        replay,
        send_label_records,
        served_rows,
        wait_drained,
    )
    from app.harness.procs import spawn_worker
    from app.kafka.topics import ensure_topics
    from app.scoring.registry import ModelRegistry
    from app.scoring.trainer import TrainConfig, train_model
    from app.settings import load_settings
    from app.transactions.labelfile import read_label_records

    work = Path(tempfile.mkdtemp(prefix="handbook-live-"))
    # the model, as `train --algorithm lgbm` makes it: the week, then the test week as eval days
    table = _training_table(t, np.concatenate([split.train, split.test]))
    model = train_model(table, TrainConfig(algorithm="lgbm", gbt=params, eval_fraction=0.3))
    boundary = model.card["data"]["split"]["boundary_utc"][:10]
    assert boundary == str(split.test_days[0]), boundary  # trained on the training week only
    registry = ModelRegistry(work / "models", device="cpu")
    registry.add(model.version, model.onnx_bytes, model.card, make_default=True)
    first, last = split.test_days
    start_ms, end_ms = _ms(first - timedelta(days=_HISTORY_DAYS)), _ms(last + timedelta(days=1))
    lines = [line for line in txns.read_bytes().splitlines()
             if start_ms <= orjson.loads(line)["ts_ms"] < end_ms]
    reach = _ms(first - timedelta(days=_LABEL_REACH_DAYS))
    known = [r for r in read_label_records(labels)
             if r.txn_ts_ms is not None and reach <= r.txn_ts_ms and r.reported_at_ms < end_ms]
    print(f"live: {len(lines):,} transactions {first - timedelta(days=_HISTORY_DAYS)}..{last}, "
          f"{len(known):,} labels, model {model.version}", flush=True)
    # offline: `fraudstream score` over the same slice and labels
    from app.scoring.oracle import run_oracle

    loaded = registry.load(model.version)
    oracle = run_oracle(lines, loaded, allowed_lateness_ms=300_000, now_ms=2**62 // 4,
                        merchants=MerchantTable.of(known), explain=False)
    offline = dict(zip(oracle.offline.table.column("txn_id").to_pylist(),
                       oracle.scores.tolist(), strict=True))
    # live: labels first, then the transactions, one worker on the local stack
    tag = uuid.uuid4().hex[:8]
    settings = load_settings().replace(topic_prefix=f"hb{tag}.", app_id=f"fs-handbook-{tag}",
                                       model_dir=work / "models", model_version=model.version)
    asyncio.run(ensure_topics(settings))
    try:
        send_label_records(settings, known)
        worker = spawn_worker(settings, work, name="worker", dispatch=False)
        try:
            began = time.perf_counter()
            sent = replay(settings, lines)
            wait_drained(settings, [worker], expected=sent, timeout_s=600)
            seconds = time.perf_counter() - began
        finally:
            worker.stop()
        rows = served_rows(settings)
        report = audit_served(settings, lines, known)
    finally:
        drop_quietly(settings)
    live = {r["txn_id"]: r["score"] for r in rows}
    diff = max(abs(live[k] - offline[k]) for k in offline)
    test_ids = t.txn_ids[split.test]
    live_scores = np.array([live[k] for k in test_ids], dtype=np.float64)
    off_scores = np.array([offline[k] for k in test_ids], dtype=np.float64)
    args = (t.days[split.test], t.cards[split.test], t.fraud[split.test])
    fig_live, fig_off = hb.figures(*args, live_scores), hb.figures(*args, off_scores)
    print(f"live: {len(rows):,} served rows in {seconds:.1f} s; audit-skew with the labels: "
          f"{report.mismatched_rows} mismatched of {report.compared:,}, "
          f"{len(report.never_served)} never served; max |live - offline score| = {diff:.3g}")
    print(f"baseline week, served scores:        {fig_live}")
    print(f"baseline week, `fraudstream score`:  {fig_off}", flush=True)
    if not (report.ok and diff <= 1e-6 and fig_live == fig_off):
        raise SystemExit("live differs from offline: see above")
    return {"rows": len(rows), "seconds": seconds, "mismatched": report.mismatched_rows,
            "max_score_diff": diff, "live": asdict(fig_live), "offline": asdict(fig_off)}
