"""IO binding on preallocated bucket buffers: same scores as a plain run, chunks, fresh results.

Runs on the CPU device (the same code as on CUDA, which only a GPU machine exercises).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from app.features.declaration import FEATURE_NAMES
from app.scoring.binding import GRAPH_ID_KEY, BoundScorer, bucket_sizes
from app.scoring.dataset import labelled_rows
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import CPU, OnnxScorer

F = len(FEATURE_NAMES)


def _cpu_session(registry: ModelRegistry) -> OnnxScorer:
    version = registry.default_version()
    return OnnxScorer((registry.path(version) / "model.onnx").read_bytes(), device="cpu")


def test_bucket_sizes_are_powers_of_two_then_the_largest() -> None:
    assert bucket_sizes(4096) == tuple(2**i for i in range(13))
    assert bucket_sizes(100) == (1, 2, 4, 8, 16, 32, 64, 100)
    assert bucket_sizes(1) == (1,)
    with pytest.raises(ValueError, match="at least 1"):
        bucket_sizes(0)


def test_bound_scores_equal_a_plain_run_at_every_size(
    registry: ModelRegistry, training_table: pa.Table
) -> None:
    plain = _cpu_session(registry)
    bound = BoundScorer(plain.session, device_type="cpu", max_rows=256)
    assert bound.active_provider == CPU
    matrix = labelled_rows(training_table).matrix[:2_000]
    whole = plain.score(matrix)
    # odd sizes land in larger buckets (padded with earlier rows), 1000 runs in chunks of 256
    for size in (1, 2, 3, 8, 13, 64, 100, 255, 256, 257, 1000):
        parts = np.concatenate([bound.score(matrix[i:i + size])
                                for i in range(0, len(matrix), size)])
        assert parts.dtype == np.float32 and parts.shape == (len(matrix),)
        assert parts.view(np.uint32).tolist() == whole.view(np.uint32).tolist(), size
    assert set(bound._buckets) <= set(bucket_sizes(256)) and 256 in bound._buckets


def test_bound_results_survive_the_next_call(registry: ModelRegistry,
                                             training_table: pa.Table) -> None:
    bound = BoundScorer(_cpu_session(registry).session, device_type="cpu", max_rows=64)
    matrix = labelled_rows(training_table).matrix[:128]
    first = bound.score(matrix[:64])
    kept = first.copy()
    bound.score(matrix[64:])
    assert np.array_equal(first, kept)


def test_bound_scorer_checks_its_input_and_warms_up(registry: ModelRegistry) -> None:
    bound = BoundScorer(_cpu_session(registry).session, device_type="cpu", max_rows=16)
    with pytest.raises(ValueError, match="float32"):
        bound.score(np.zeros((3, F), dtype=np.float64))
    with pytest.raises(ValueError, match="float32"):
        bound.score(np.zeros((3, F + 1), dtype=np.float32))
    assert bound.score(np.zeros((0, F), dtype=np.float32)).shape == (0,)
    assert bound.bucket_for(5) == 8 and bound.bucket_for(16) == 16
    with pytest.raises(ValueError, match="exceed"):
        bound.bucket_for(17)
    bound.warm_up((3, 16))
    assert list(bound._buckets) == [16, 4]  # largest first: it fills the memory arena


def test_each_bucket_has_its_own_graph_id(registry: ModelRegistry) -> None:
    plain = _cpu_session(registry)
    bound = BoundScorer(plain.session, device_type="cpu", max_rows=8, cuda_graph=True)
    bound.warm_up()
    ids = {size: b.run_options.get_run_config_entry(GRAPH_ID_KEY)
           for size, b in bound._buckets.items()}
    assert ids == {1: "0", 2: "1", 4: "2", 8: "3"}  # fixed shape and buffers per graph
    matrix = np.random.default_rng(1).random((8, F), dtype=np.float32)
    assert np.array_equal(bound.score(matrix[:5]), plain.score(matrix[:5]))
