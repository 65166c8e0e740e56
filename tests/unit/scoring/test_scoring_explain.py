"""Occlusion explanations: what they compute, deterministic whatever the batch, and the same in
the worker's scoring stage as in the offline oracle."""

from __future__ import annotations

import orjson
from scoring_support import LATENESS_MS, SmallLog

from app.features.declaration import FEATURE_NAMES
from app.kafka.records import SourceMessage
from app.scoring.card import MODEL_FILE
from app.scoring.explain import TOP, Explainer, explainer_for, reference_from_onnx
from app.scoring.oracle import run_oracle
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import features_matrix
from app.settings import load_settings
from app.stream.engine.pipeline import Scored
from app.stream.engine.scoring import ScoringStage
from app.transactions.contract import parse_transaction


def _rows(small_log: SmallLog, registry: ModelRegistry, n: int = 40):  # noqa: ANN202
    run = run_oracle(small_log.lines, registry, allowed_lateness_ms=LATENESS_MS,
                     now_ms=small_log.now_ms, explain=False)
    table = run.offline.table.slice(0, n)
    values = list(zip(*(table.column(c).to_pylist() for c in FEATURE_NAMES), strict=True))
    return values, run


def test_each_contribution_is_the_score_minus_the_occluded_score(small_log, registry):
    model = registry.load()
    values, _ = _rows(small_log, registry, 6)
    matrix = features_matrix(values)
    scores = model.scorer.score(matrix)
    reference = reference_from_onnx(model.path / MODEL_FILE)
    explained = Explainer(model.scorer, reference, top=len(FEATURE_NAMES)).explain(
        matrix, scores, values)
    for i, explanation in enumerate(explained):
        assert sorted(c.name for c in explanation) == sorted(FEATURE_NAMES)
        magnitudes = [abs(c.contribution) for c in explanation]
        assert magnitudes == sorted(magnitudes, reverse=True)
        for c in explanation:
            j = FEATURE_NAMES.index(c.name)
            assert c.value == values[i][j]
            row = matrix[i].copy()
            row[j] = reference[j]
            occluded = float(model.scorer.score(row[None, :])[0])
            assert c.contribution == float(scores[i]) - occluded


def test_the_same_row_gets_the_same_explanation_in_any_batch(small_log, registry):
    model = registry.load()
    explainer = explainer_for(model)
    assert explainer is not None
    values, _ = _rows(small_log, registry, 40)
    matrix = features_matrix(values)
    scores = model.scorer.score(matrix)
    whole = explainer.explain(matrix, scores, values)
    assert all(len(e) == TOP for e in whole)
    for i in (0, 7, 39):
        alone = explainer.explain(matrix[i:i + 1], scores[i:i + 1], values[i:i + 1])
        assert alone[0] == whole[i]
    assert explainer.explain(matrix[:0], scores[:0], []) == []


def test_the_worker_stage_and_the_oracle_explain_every_action_alike(small_log, registry):
    oracle = run_oracle(small_log.lines, registry, allowed_lateness_ms=LATENESS_MS,
                        now_ms=small_log.now_ms)
    offline = {a.idempotency_key: a.explanation for a in oracle.actions}
    assert offline and all(e is not None and len(e) == TOP for e in offline.values())
    # the live stage over the same accepted rows, in batches of 37
    table = oracle.offline.table
    by_id = {}
    for line in small_log.lines:
        try:
            txn = parse_transaction(line, now_ms=small_log.now_ms)
        except Exception:  # noqa: BLE001 - the log's malformed lines
            continue
        by_id.setdefault(txn.txn_id, txn)
    values = list(zip(*(table.column(c).to_pylist() for c in FEATURE_NAMES), strict=True))
    source = SourceMessage("transactions", 0, 0, None, b"")
    scored = [Scored(source, by_id[t], tuple(v), False)
              for t, v in zip(table.column("txn_id").to_pylist(), values, strict=True)]
    stage = ScoringStage(registry.load(), load_settings({}), lambda: small_log.now_ms)
    live = {}
    for start in range(0, len(scored), 37):
        for record in stage.run(scored[start:start + 37]):
            if record.topic == "actions":
                action = orjson.loads(record.value)
                live[action["idempotency_key"]] = action["explanation"]
    assert set(live) == set(offline)
    for key, explanation in live.items():
        assert explanation == [c.to_dict() for c in offline[key]]
