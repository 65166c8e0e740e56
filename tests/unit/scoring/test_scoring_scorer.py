"""The scorer: one conversion to float32, the provider it really runs on, batch-size determinism."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pytest

from app.features.declaration import FEATURE_NAMES
from app.scoring.dataset import labelled_rows
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import CPU, CUDA, OnnxScorer, features_matrix

F = len(FEATURE_NAMES)


def test_features_matrix_is_float32_rounded_once_from_exact_values() -> None:
    big = 2**24 + 1  # not a float32; float64 holds it exactly, then one rounding
    vec = tuple([big] + [1] * (F - 2) + [0.1])
    m = features_matrix([vec, tuple(range(F))])
    assert m.dtype == np.float32 and m.shape == (2, F)
    assert m[0, 0] == np.float32(float(big)) and m[0, -1] == np.float32(0.1)
    assert features_matrix([]).shape == (0, F)


def test_features_matrix_rejects_wrong_width_and_non_finite_values() -> None:
    with pytest.raises(ValueError, match=rf"expected \(N, {F}\)"):
        features_matrix([tuple(range(F - 1))])
    with pytest.raises(ValueError, match="feature vector 1 holds a non-finite"):
        features_matrix([tuple(range(F)), tuple([float("nan")] * F)])


def test_features_matrix_rejects_ragged_rows_that_add_up() -> None:
    # F-1 and F+1 values make 2F in all: a flat read would shift the second row silently
    with pytest.raises(ValueError, match=rf"expected \(N, {F}\)"):
        features_matrix([tuple(range(F - 1)), tuple(range(F + 1))])


def test_the_compiled_conversion_matches_numpys_value_for_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from app.scoring import scorer
    if scorer._fill is None:
        pytest.skip("the compiled state is not built")
    rng = np.random.default_rng(3)
    edge = [2**53 + 1, 2**60 + 3, -(2**63), True, False, -0.0, 1e300, -1e-320, 0.1, 3]
    rows = [tuple(edge[(i + j) % len(edge)] for j in range(F)) for i in range(len(edge))]
    rows += [tuple(float(x) if j % 2 else int(x * 1e6) for j, x in enumerate(r))
             for r in rng.normal(size=(50, F)) * 1e3]
    rows.append(list(range(F)))  # a list row, as tuples are
    compiled = features_matrix(rows)
    monkeypatch.setattr(scorer, "_fill", None)
    assert compiled.tobytes() == features_matrix(rows).tobytes()  # -0.0 and inf included
    assert np.isinf(compiled).any() and compiled.flags["C_CONTIGUOUS"]


def test_values_the_compiled_conversion_does_not_take_go_through_numpy() -> None:
    # numpy scalars (an offline column's values) convert as numpy converts them
    row = tuple(np.int64(i) if i % 2 else np.float32(i + 0.5) for i in range(F))
    assert features_matrix([row]).tolist() == [[float(v) for v in row]]
    with pytest.raises(ValueError, match="feature vector 0 holds a non-finite"):
        features_matrix([tuple([np.float64("inf")] + [np.int64(1)] * (F - 1))])


def test_score_rejects_anything_but_the_model_input(registry: ModelRegistry) -> None:
    scorer = registry.load().scorer
    with pytest.raises(ValueError, match="float32"):
        scorer.score(np.zeros((3, F), dtype=np.float64))
    with pytest.raises(ValueError, match="float32"):
        scorer.score(np.zeros((3, F - 1), dtype=np.float32))
    assert scorer.score(np.zeros((0, F), dtype=np.float32)).shape == (0,)


def test_scores_are_bit_identical_across_batch_sizes_on_cpu(
    registry: ModelRegistry, training_table: pa.Table
) -> None:
    matrix = labelled_rows(training_table).matrix[:3_000]
    for version in registry.versions():
        scorer = registry.load(version).scorer
        whole = scorer.score(matrix)
        for size in (1, 3, 8, 13, 64, 256, 1000):
            parts = np.concatenate([scorer.score(matrix[i:i + size])
                                    for i in range(0, len(matrix), size)])
            assert parts.view(np.uint32).tolist() == whole.view(np.uint32).tolist(), size


def test_active_provider_is_what_the_session_runs_on(registry: ModelRegistry) -> None:
    version = registry.default_version()
    model_bytes = (registry.path(version) / "model.onnx").read_bytes()
    cpu = OnnxScorer(model_bytes, device="cpu")
    assert cpu.active_provider == CPU == cpu.session.get_providers()[0]
    auto = OnnxScorer(model_bytes, device="auto")
    assert auto.active_provider == auto.session.get_providers()[0]
    assert auto.active_provider in (CUDA, CPU)
    if auto.active_provider == CPU:  # CUDA libraries absent: "cuda" must refuse, not fall back
        with pytest.raises(RuntimeError, match="CUDA was required"):
            OnnxScorer(model_bytes, device="cuda")
    assert cpu.session.get_session_options().intra_op_num_threads == 1
    assert (cpu.session.get_session_options().execution_mode
            == ort.ExecutionMode.ORT_SEQUENTIAL)
