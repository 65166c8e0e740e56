"""Shared scoring fixtures: one small generated log, its training table and two trained models."""

from __future__ import annotations

import pyarrow as pa
import pytest
from scoring_support import LATENESS_MS, LOG_CONFIG, TRAIN_CONFIG, SmallLog

from app.datagen.generator import generate_log
from app.features.offline import compute_features
from app.features.training_set import Label, build_training_set
from app.scoring.registry import ModelRegistry
from app.scoring.trainer import TrainConfig, TrainedModel, train_model


@pytest.fixture(scope="session")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> SmallLog:
    from app.datagen.writer import write_log

    log = generate_log(LOG_CONFIG)
    root = tmp_path_factory.mktemp("small_log")
    events, labels = root / "events.jsonl", root / "events.labels.jsonl"
    write_log(log, events, labels)
    pairs = list(log.iter_lines())
    return SmallLog(
        lines=[line for line, _ in pairs], kinds=[str(kind) for _, kind in pairs],
        labels=[Label(lab.txn_id, lab.label, lab.label_ts_ms) for lab in log.labels()],
        now_ms=LOG_CONFIG.validation_now_ms, events_path=events, labels_path=labels,
    )


@pytest.fixture(scope="session")
def training_table(small_log: SmallLog) -> pa.Table:
    offline = compute_features(small_log.lines, allowed_lateness_ms=LATENESS_MS,
                               now_ms=small_log.now_ms)
    return build_training_set(offline, small_log.labels).table


@pytest.fixture(scope="session")
def model_a(training_table: pa.Table) -> TrainedModel:
    return train_model(training_table, TRAIN_CONFIG)


@pytest.fixture(scope="session")
def model_b(training_table: pa.Table) -> TrainedModel:
    return train_model(training_table, TrainConfig(seed=1, max_iter=30, hidden=(8,)))


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory, model_a: TrainedModel,
             model_b: TrainedModel) -> ModelRegistry:
    reg = ModelRegistry(tmp_path_factory.mktemp("models"), device="cpu")
    reg.add(model_a.version, model_a.onnx_bytes, model_a.card, make_default=True)
    reg.add(model_b.version, model_b.onnx_bytes, model_b.card)
    return reg
