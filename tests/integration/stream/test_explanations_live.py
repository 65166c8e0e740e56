"""Explanations on the real stack over the demo's log: every action the worker emits carries
the explanation the offline oracle computes for the same transaction."""

from __future__ import annotations

import onnxruntime
import orjson
import pytest

from app.harness.pipeline import (
    assert_live_matches_oracle,
    lines_of,
    make_log,
    oracle_for,
    read,
    replay,
    wait_drained,
)
from app.kafka import topics
from app.settings import Settings
from tests.support.live import StartWorker

pytestmark = pytest.mark.integration


def test_live_explanations_equal_the_oracles_over_the_demo_log(fresh_settings: Settings,
                                                               start_worker: StartWorker) -> None:
    # the demo's generator settings (app/cli/demo.py defaults)
    lines = lines_of(make_log(cards=500, txns=10_000, seed=7, malformed=0.02))
    worker = start_worker(fresh_settings, dispatch=False)
    sent = replay(fresh_settings, lines)
    wait_drained(fresh_settings, [worker], expected=sent)
    worker.stop()
    actions = [orjson.loads(r.value) for r in read(fresh_settings, topics.ACTIONS)]
    assert actions and all(len(a["explanation"]) >= 3 for a in actions)
    # keys, types, scores and explanations (assert_live_matches_oracle compares them)
    assert assert_live_matches_oracle(fresh_settings, lines) == len(
        {a["idempotency_key"] for a in actions})
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        # on the CPU provider, value for value: names, values and contributions
        offline = {a.idempotency_key: [c.to_dict() for c in a.explanation or ()]
                   for a in oracle_for(fresh_settings, lines).actions}
        assert all(a["explanation"] == offline[a["idempotency_key"]] for a in actions)
