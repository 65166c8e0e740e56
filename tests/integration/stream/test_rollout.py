"""Model rollout mid-replay: workers switch between batches, refuse a bad model, keep every key."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import pytest

from app.actions import idempotency_key
from app.control.publisher import publish_activation
from app.harness.pipeline import (
    assert_live_matches_oracle,
    lines_of,
    live_actions,
    make_log,
    replay,
    served_rows,
    wait_drained,
)
from app.harness.procs import wait_until
from app.kafka import topics
from app.kafka.inspect import topic_sizes
from app.scoring.registry import ModelRegistry
from app.settings import Settings
from tests.support.live import StartWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NEW = "mlp-rollout-b"
BROKEN = "mlp-broken"


def model_dir_with_rollout_versions(source: Path, target: Path) -> str:
    """Copy the models; add NEW (same weights, new name) and BROKEN (card out of order)."""
    shutil.copytree(source, target)
    registry = ModelRegistry(target, device="cpu")
    base = registry.default_version()
    card = dict(registry.card(base).raw)
    card["version"] = NEW
    registry.add(NEW, (registry.path(base) / "model.onnx").read_bytes(), card)
    broken = target / BROKEN
    shutil.copytree(registry.path(base), broken)
    bad = json.loads((broken / "card.json").read_text())
    bad["version"] = BROKEN
    bad["features"] = bad["features"][::-1]  # the worker must refuse: input order differs
    (broken / "card.json").write_text(json.dumps(bad))
    return base


def test_rollout_mid_replay_changes_no_key(fresh_settings: Settings, tmp_path: Path,
                                           start_worker: StartWorker) -> None:
    base = model_dir_with_rollout_versions(fresh_settings.model_dir, tmp_path / "models")
    settings = fresh_settings.replace(model_dir=tmp_path / "models")
    log = make_log(cards=1000, txns=20_000, seed=31, redelivery=0.01, out_of_order=0.01)
    lines = lines_of(log)
    served = settings.topic(topics.FEATURES_SERVED)

    def served_count() -> int:
        return asyncio.run(topic_sizes(settings, [served]))[served]

    worker = start_worker(settings, dispatch=False)
    producer = threading.Thread(target=replay, args=(settings, lines, 2_500.0), daemon=True)
    producer.start()
    wait_until(lambda: served_count() > 4_000, timeout_s=120, what="4k served")
    asyncio.run(publish_activation(settings, BROKEN))
    wait_until(lambda: served_count() > 8_000, timeout_s=120, what="8k served")
    asyncio.run(publish_activation(settings, NEW))
    producer.join(timeout=120)
    wait_drained(settings, [worker], expected=len(lines))
    worker.stop()
    rows = served_rows(settings)
    versions = {r["model_version"] for r in rows}
    assert versions == {base, NEW}, versions  # the broken one was refused, the new one served
    # per partition, once the new model served a row the old one never served again
    for partition in {r["partition"] for r in rows}:
        seq = [r["model_version"] for r in sorted(rows, key=lambda r: r["offset"])
               if r["partition"] == partition]
        if NEW in seq:
            assert base not in seq[seq.index(NEW):]
    # keys depend on (type, txn_id) only: identical to the oracle's under the old model
    assert_live_matches_oracle(settings.replace(model_version=base), lines)
    for key, copies in live_actions(settings).items():
        for action in copies:
            assert key == idempotency_key(action["type"], action["txn_id"])
