"""`train` writes the drift reference; `model reference` recomputes the same one from the
training set, and refuses a set that is not the model's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from app.drift.offline import reference_of_training_set
from app.scoring.dataset import labelled_rows
from app.scoring.drift_reference import DriftReference
from app.scoring.registry import ModelRegistry
from app.scoring.trainer import REFERENCE_SOURCE, TrainedModel


def test_train_writes_the_reference_of_its_training_rows(model_a: TrainedModel,
                                                         training_table: pa.Table) -> None:
    ref = DriftReference.of_card(model_a.card, model_a.version)
    assert ref.rows == model_a.card["data"]["train_rows"]
    assert all(sum(b.counts) == ref.rows for _, b in ref.series)
    assert ref.source == REFERENCE_SOURCE


def test_reference_recomputed_for_an_existing_model_equals_trains(
        model_a: TrainedModel, training_table: pa.Table, tmp_path) -> None:  # noqa: ANN001
    registry = ModelRegistry(tmp_path, device="cpu")
    registry.add(model_a.version, model_a.onnx_bytes, model_a.card)
    loaded = registry.load(model_a.version)
    again = reference_of_training_set(loaded, training_table, source=REFERENCE_SOURCE)
    assert again == DriftReference.of_card(model_a.card, model_a.version)
    # another table is not the model's training set
    rows = labelled_rows(training_table)
    assert len(rows.labels) > 10
    other = training_table.slice(0, training_table.num_rows - 1)
    with pytest.raises(ValueError, match="not the training set"):
        reference_of_training_set(loaded, other, source=REFERENCE_SOURCE)
    assert np.isfinite(rows.matrix).all()
