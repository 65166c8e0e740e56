"""The hybrid scorer: routing by batch size, the calibrated crossover, metrics, settings.

CUDA is replaced by a second CPU session (or a fake with a scripted cost): routing, calibration
and counting do not depend on what the second provider is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import REGISTRY

from app.features.declaration import FEATURE_NAMES
from app.scoring.binding import BoundScorer
from app.scoring.dataset import labelled_rows
from app.scoring.hybrid import (
    NEVER,
    Calibration,
    GpuOptions,
    HybridScorer,
    build_scorer,
    calibrate,
    crossover,
    hybrid,
)
from app.scoring.metrics import PrometheusScorerMetrics, ProviderTally
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import CPU, CUDA, OnnxScorer
from app.settings import load_settings

F = len(FEATURE_NAMES)


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeScorer:
    """A scorer whose calls cost fixed + per_row seconds on a shared fake clock."""

    provider: str
    fixed: float
    per_row: float
    clock: Clock
    calls: list[int] = field(default_factory=list)

    @property
    def active_provider(self) -> str:
        return self.provider

    def score(self, matrix: np.ndarray) -> np.ndarray:
        self.calls.append(matrix.shape[0])
        self.clock.now += self.fixed + self.per_row * matrix.shape[0]
        return np.full(matrix.shape[0], 0.5 if self.provider == CUDA else 0.25, np.float32)


def _pair(clock: Clock | None = None) -> tuple[FakeScorer, FakeScorer]:
    clock = clock or Clock()
    # CPU: 5 µs + 0.15 µs a row; CUDA: 100 µs + 0.005 µs a row (the H100's shape)
    return FakeScorer(CPU, 5e-6, 1.5e-7, clock), FakeScorer(CUDA, 100e-6, 5e-9, clock)


def _model_bytes(registry: ModelRegistry) -> bytes:
    return (registry.path(registry.default_version()) / "model.onnx").read_bytes()


def _cuda_loads(registry: ModelRegistry) -> bool:
    return OnnxScorer(_model_bytes(registry), device="auto").active_provider == CUDA


def test_crossover_is_where_cuda_wins_from_then_on() -> None:
    sizes = [1, 2, 4]
    assert crossover(sizes, [1, 2, 3], [5, 5, 5]) == NEVER  # CUDA never faster
    assert crossover(sizes, [5, 5, 5], [1, 2, 3]) == 1  # CUDA always faster
    # a win at 2 by noise does not count while CUDA loses at 4 again; ties go to the CPU
    assert crossover([1, 2, 4, 8], [1, 1, 4, 9], [2, 0.5, 4, 5]) == 5
    with pytest.raises(ValueError, match="one CPU and one CUDA"):
        crossover(sizes, [1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="increase"):
        crossover([1, 4, 2], [1, 2, 3], [1, 2, 3])


def test_crossover_interpolates_the_cpu_cost_between_buckets() -> None:
    sizes = [256, 512, 1024]
    cpu = [5e-6 + 1.5e-7 * n for n in sizes]  # 43.4, 81.8, 158.6 µs
    gpu = [100e-6] * 3
    # 512 < n <= 1024 runs on CUDA at bucket 1024 (100 µs): the CPU passes that at n = 634
    n = crossover(sizes, cpu, gpu)
    assert n == 634
    assert 5e-6 + 1.5e-7 * n > 100e-6 > 5e-6 + 1.5e-7 * (n - 1)


def test_calibration_times_both_scorers_at_every_size() -> None:
    clock = Clock()
    cpu, gpu = _pair(clock)
    sizes = (1, 16, 256, 1024, 4096)
    cal = calibrate(cpu, gpu, sizes=sizes, repeats=5, warm_up=1, clock=clock)
    assert cal.sizes == sizes
    assert cal.cpu_s == pytest.approx([5e-6 + 1.5e-7 * n for n in sizes])
    assert cal.gpu_s == pytest.approx([100e-6 + 5e-9 * n for n in sizes])
    assert cal.min_batch == crossover(sizes, cal.cpu_s, cal.gpu_s)
    assert 256 < cal.min_batch <= 1024
    assert sorted(set(cpu.calls)) == list(sizes) and len(cpu.calls) == len(sizes) * 6
    assert "1024:159/105" in cal.describe()


def test_hybrid_routes_by_batch_size_and_counts_the_provider_of_every_call() -> None:
    cpu, gpu = _pair()
    tally = ProviderTally()
    scorer = HybridScorer(cpu, gpu, min_batch=300, name="m1", metrics=tally)
    assert scorer.active_provider == "hybrid(CUDA>=300,CPU)"
    assert tally.min_batch == {"m1": 300}
    for rows in (1, 299, 300, 5000, 64):
        scores = scorer.score(np.zeros((rows, F), np.float32))
        assert scores.shape == (rows,)
        assert float(scores[0]) == (0.5 if rows >= 300 else 0.25)
    assert scorer.score(np.zeros((0, F), np.float32)).shape == (0,)
    assert cpu.calls == [1, 299, 64] and gpu.calls == [300, 5000]
    assert tally.calls == {CPU: 3, CUDA: 2}
    assert tally.rows == {CPU: 364, CUDA: 5300}
    assert tally.share(CUDA) == pytest.approx(5300 / 5664)
    with pytest.raises(ValueError, match="float32"):
        scorer.score(np.zeros((3, F), np.float64))
    with pytest.raises(ValueError, match="at least 1"):
        HybridScorer(cpu, gpu, min_batch=0)


def test_hybrid_that_never_picks_cuda_says_so() -> None:
    cpu, gpu = _pair()
    tally = ProviderTally()
    scorer = HybridScorer(cpu, gpu, min_batch=NEVER, name="m", metrics=tally)
    assert scorer.active_provider == "hybrid(CUDA>=never,CPU)"
    assert tally.min_batch == {"m": math.inf}
    scorer.score(np.zeros((4096, F), np.float32))
    assert gpu.calls == [] and cpu.calls == [4096]


def test_a_cuda_failure_sends_every_batch_to_the_cpu(caplog: pytest.LogCaptureFixture) -> None:
    cpu, gpu = _pair()

    def broken(matrix: np.ndarray) -> np.ndarray:
        raise RuntimeError("CUDA failure: an illegal memory access was encountered")

    gpu.score = broken  # type: ignore[method-assign]
    tally = ProviderTally()
    scorer = HybridScorer(cpu, gpu, min_batch=16, name="m", metrics=tally)
    assert scorer.score(np.zeros((32, F), np.float32)).tolist() == [0.25] * 32
    assert "CUDA scoring failed" in caplog.text
    assert scorer.min_batch == NEVER and tally.min_batch == {"m": math.inf}
    scorer.score(np.zeros((64, F), np.float32))
    assert cpu.calls == [32, 64] and tally.rows == {CPU: 96}
    cpu.score = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="illegal memory"):  # a CPU failure is not hidden
        scorer.score(np.zeros((1, F), np.float32))


def test_hybrid_over_two_real_sessions_scores_like_the_oracle(
    registry: ModelRegistry, training_table: pa.Table
) -> None:
    data = _model_bytes(registry)
    oracle = OnnxScorer(data, device="cpu")
    second = OnnxScorer(data, device="cpu")
    bound = BoundScorer(second.session, device_type="cpu", max_rows=512)
    tally = ProviderTally()
    fixed = hybrid(OnnxScorer(data, device="cpu"), bound, metrics=tally, name="v",
                   options=GpuOptions(min_batch=100, max_rows=512))
    assert fixed.min_batch == 100 and fixed.calibration is None
    matrix = labelled_rows(training_table).matrix[:3_000]
    whole = oracle.score(matrix)
    for size in (1, 99, 100, 700):
        parts = np.concatenate([fixed.score(matrix[i:i + size])
                                for i in range(0, len(matrix), size)])
        assert parts.view(np.uint32).tolist() == whole.view(np.uint32).tolist(), size
    assert set(tally.rows) == {CPU}  # both halves are CPU sessions here
    assert sum(tally.rows.values()) == 4 * len(matrix)

    measured = hybrid(OnnxScorer(data, device="cpu"), bound, name="v",
                      options=GpuOptions(max_rows=512, calibration_repeats=3))
    cal = measured.calibration
    assert isinstance(cal, Calibration) and cal.sizes == bound.sizes
    assert measured.min_batch == cal.min_batch >= 1


def test_build_scorer_without_cuda_is_the_single_cpu_session(registry: ModelRegistry) -> None:
    data = _model_bytes(registry)
    tally = ProviderTally()
    cpu = build_scorer(data, device="cpu", metrics=tally, name="v")
    assert isinstance(cpu, OnnxScorer) and cpu.active_provider == CPU
    cpu.score(np.zeros((7, F), np.float32))
    assert tally.rows == {CPU: 7} and tally.calls == {CPU: 1}
    auto = build_scorer(data, device="auto", gpu=GpuOptions(min_batch=64), metrics=tally)
    if _cuda_loads(registry):  # a GPU machine: CPU below 64 rows, CUDA from 64
        assert isinstance(auto, HybridScorer)
        assert auto.active_provider == "hybrid(CUDA>=64,CPU)"
        auto.score(np.zeros((64, F), np.float32))
        assert tally.rows[CUDA] == 64
    else:  # what every CPU-only user had before the hybrid: one session, CPU
        assert isinstance(auto, OnnxScorer) and auto.active_provider == CPU
        with pytest.raises(RuntimeError, match="CUDA was required"):
            build_scorer(data, device="cuda")


def test_gpu_options_come_from_settings(registry: ModelRegistry) -> None:
    default = load_settings({})
    assert default.gpu_min_batch is None and default.gpu_max_rows == 4096
    assert default.cuda_graph is True  # measured 2-3x cheaper a call on an H200
    assert GpuOptions.from_settings(default) == GpuOptions()
    assert GpuOptions.from_settings(load_settings({"FRAUDSTREAM_CUDA_GRAPH": "false"})).cuda_graph is False
    s = load_settings({"FRAUDSTREAM_GPU_MIN_BATCH": "512", "FRAUDSTREAM_GPU_MAX_ROWS": "8192",
                       "FRAUDSTREAM_CUDA_GRAPH": "true", "FRAUDSTREAM_SCORER_DEVICE": "cpu",
                       "FRAUDSTREAM_MODEL_DIR": str(registry.root)})
    assert GpuOptions.from_settings(s) == GpuOptions(min_batch=512, max_rows=8192,
                                                     cuda_graph=True)
    reg = ModelRegistry.from_settings(s, metrics=False)
    assert reg.gpu == GpuOptions(min_batch=512, max_rows=8192, cuda_graph=True)
    assert reg.device == "cpu" and reg.metrics is None
    assert reg.load().scorer.active_provider == CPU
    with pytest.raises(ValueError, match="FRAUDSTREAM_GPU_MIN_BATCH"):
        load_settings({"FRAUDSTREAM_GPU_MIN_BATCH": "many"})
    with pytest.raises(ValueError, match="at least 1"):
        GpuOptions(min_batch=0)


def test_prometheus_metrics_count_calls_rows_and_the_crossover() -> None:
    metrics = PrometheusScorerMetrics()

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    calls = value("fraudstream_scorer_calls_total", provider=CUDA)
    rows = value("fraudstream_scorer_rows_total", provider=CUDA)
    cpu, gpu = _pair()
    scorer = HybridScorer(cpu, gpu, min_batch=128, name="prom-test", metrics=metrics)
    scorer.score(np.zeros((200, F), np.float32))
    assert value("fraudstream_scorer_calls_total", provider=CUDA) == calls + 1
    assert value("fraudstream_scorer_rows_total", provider=CUDA) == rows + 200
    assert value("fraudstream_scorer_gpu_min_batch", model_version="prom-test") == 128
    assert PrometheusScorerMetrics()._calls is metrics._calls  # registered once


def test_build_scorer_with_cuda_builds_the_hybrid_and_survives_refused_graphs(
    registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The CUDA branch of build_scorer, with CPU sessions standing in for CUDA ones."""
    import app.scoring.hybrid as hybrid_module

    built: list[dict[str, str] | None] = []

    def fake_onnx(model: bytes, *, device: str, cuda_options: dict[str, str] | None = None,
                  **kw: object) -> OnnxScorer:
        built.append(cuda_options)
        if cuda_options and cuda_options.get("enable_cuda_graph") == "1":
            raise RuntimeError("graph capture needs every node on CUDA")  # what ORT may say
        scorer = OnnxScorer(model, device="cpu", **kw)  # type: ignore[arg-type]
        if device != "cpu":
            scorer._provider = CUDA  # the stand-in "CUDA" session
        return scorer

    def cpu_bound(session: object, **kw: object) -> BoundScorer:
        bound = BoundScorer(session, **{**kw, "device_type": "cpu"})  # type: ignore[arg-type]
        bound._provider = CUDA
        return bound

    monkeypatch.setattr(hybrid_module, "OnnxScorer", fake_onnx)
    monkeypatch.setattr(hybrid_module, "BoundScorer", cpu_bound)
    data = _model_bytes(registry)
    tally = ProviderTally()
    with caplog.at_level("INFO", logger="app.scoring.hybrid"):
        scorer = build_scorer(data, device="auto", name="v", metrics=tally,
                              gpu=GpuOptions(min_batch=8, max_rows=64, cuda_graph=True))
    assert isinstance(scorer, HybridScorer) and scorer.min_batch == 8
    assert isinstance(scorer.gpu, BoundScorer) and scorer.gpu.cuda_graph is False
    assert built[0] == {"enable_cuda_graph": "1"} and built[1] is None  # refused, then without
    assert "CUDA graphs refused" in caplog.text and "CUDA from batch 8" in caplog.text
    assert set(scorer.gpu._buckets) == {1, 2, 4, 8, 16, 32, 64}  # all warmed before any batch
    oracle = OnnxScorer(data, device="cpu")
    matrix = np.random.default_rng(0).random((100, F), dtype=np.float32) * 100
    for rows in (1, 7, 8, 100):
        assert np.array_equal(scorer.score(matrix[:rows]), oracle.score(matrix[:rows]))
    assert tally.calls == {CPU: 2, CUDA: 2} and tally.rows == {CPU: 8, CUDA: 108}
    assert tally.min_batch == {"v": 8}

    with caplog.at_level("INFO", logger="app.scoring.hybrid"):
        calibrated = build_scorer(data, device="cuda", name="v",
                                  gpu=GpuOptions(max_rows=64, calibration_repeats=2))
    assert isinstance(calibrated, HybridScorer) and calibrated.calibration is not None
    assert calibrated.calibration.sizes == (1, 2, 4, 8, 16, 32, 64)
    assert "(calibrated; batch:cpu/cuda us 1:" in caplog.text
