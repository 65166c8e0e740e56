"""The hybrid scorer: batches below a crossover on the CPU session, the others on CUDA.

A CUDA call of the scoring model costs about 100 µs whatever the batch; the single-threaded CPU
session costs a few µs plus about 0.15 µs a row. Small batches are therefore faster on the CPU
and large ones (catch-up after an outage, replays, peaks) on the GPU. `HybridScorer` holds both
and picks per call by batch size. The crossover is measured at start-up (`calibrate`: both
scorers timed at every bucket size, `crossover` picks the smallest size from which CUDA wins at
every larger size) or set by FRAUDSTREAM_GPU_MIN_BATCH; it is logged and exported
(`fraudstream_scorer_gpu_min_batch`), and every call's provider is counted.

Decisions: CPU rows are bit-identical to the oracle's; CUDA rows differ by a few ulps at most,
inside the oracle's boundary band (benchmarks/provider_agreement.py checks every bucket size).
"""

from __future__ import annotations

import logging
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from app.scoring.binding import BoundScorer
from app.scoring.contract import DECLARED, FeatureSpec
from app.scoring.metrics import ScorerMetrics
from app.scoring.scorer import CUDA, Device, OnnxScorer, Scorer, check_input

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)

#: min_batch meaning "never on CUDA" (CUDA lost the calibration even at the largest bucket).
NEVER: Final = sys.maxsize


@dataclass(frozen=True, slots=True)
class GpuOptions:
    """How a scorer uses CUDA when onnxruntime can load it (ignored on CPU-only machines)."""

    #: Batches of at least this many rows go to CUDA; None: measured at start-up.
    min_batch: int | None = None
    #: Rows of the largest preallocated device buffer; larger batches run in chunks of it.
    max_rows: int = 4096
    #: Capture one CUDA graph per bucket size (onnxruntime `enable_cuda_graph`).
    cuda_graph: bool = True
    #: Timed calls per bucket size and provider in the start-up calibration (median taken).
    calibration_repeats: int = 15

    def __post_init__(self) -> None:
        if self.min_batch is not None and self.min_batch < 1:
            raise ValueError(f"GPU min batch must be at least 1, got {self.min_batch}")
        if self.max_rows < 1:
            raise ValueError(f"GPU max rows must be at least 1, got {self.max_rows}")
        if self.calibration_repeats < 1:
            raise ValueError("calibration needs at least one timed call per size")

    @classmethod
    def from_settings(cls, settings: Settings) -> GpuOptions:
        """FRAUDSTREAM_GPU_MIN_BATCH, FRAUDSTREAM_GPU_MAX_ROWS and FRAUDSTREAM_CUDA_GRAPH."""
        return cls(min_batch=settings.gpu_min_batch, max_rows=settings.gpu_max_rows,
                   cuda_graph=settings.cuda_graph)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Median seconds per `score()` call of each scorer at each size, and the crossover."""

    sizes: tuple[int, ...]
    cpu_s: tuple[float, ...]
    gpu_s: tuple[float, ...]
    min_batch: int

    def describe(self) -> str:
        """One line for the log: size cpu/gpu µs per call."""
        cells = (f"{n}:{c * 1e6:.0f}/{g * 1e6:.0f}"
                 for n, c, g in zip(self.sizes, self.cpu_s, self.gpu_s, strict=True))
        return "batch:cpu/cuda us " + " ".join(cells)


def crossover(sizes: Sequence[int], cpu_s: Sequence[float], gpu_s: Sequence[float]) -> int:
    """The smallest batch from which CUDA is faster, given per-call times at increasing sizes.

    CUDA must win at the largest size and at every size above the chosen one, else NEVER.
    Between the last size CUDA loses at (a) and the first it wins at (b), a batch of n rows
    runs on CUDA at bucket b, so its CUDA cost is gpu_s(b) while its CPU cost grows with n:
    the CPU time is interpolated linearly and the first n in (a, b] where it exceeds
    gpu_s(b) is returned.
    """
    if not (len(sizes) == len(cpu_s) == len(gpu_s)) or not sizes:
        raise ValueError("crossover needs one CPU and one CUDA time per size")
    if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
        raise ValueError(f"sizes must increase: {list(sizes)}")
    first = len(sizes)
    while first > 0 and gpu_s[first - 1] < cpu_s[first - 1]:
        first -= 1
    if first == len(sizes):
        return NEVER
    if first == 0:
        return sizes[0]
    a, b = sizes[first - 1], sizes[first]
    per_row = (cpu_s[first] - cpu_s[first - 1]) / (b - a)
    if per_row <= 0:
        return b
    rows_more = (gpu_s[first] - cpu_s[first - 1]) / per_row
    return min(b, max(a + 1, a + math.floor(rows_more) + 1))


def calibrate(
    cpu: Scorer, gpu: Scorer, *, sizes: Sequence[int], spec: FeatureSpec = DECLARED,
    repeats: int = 15, warm_up: int = 3, clock: Callable[[], float] = time.perf_counter,
) -> Calibration:
    """Time both scorers at each size (alternating calls, median of `repeats`); pick the crossover.

    The input is a constant matrix: the model is dense, its cost does not depend on values.
    """
    cpu_s: list[float] = []
    gpu_s: list[float] = []
    for size in sizes:
        matrix = np.ones((size, spec.width), dtype=np.float32)
        for _ in range(warm_up):
            cpu.score(matrix)
            gpu.score(matrix)
        cpu_t: list[float] = []
        gpu_t: list[float] = []
        for _ in range(repeats):
            t0 = clock()
            cpu.score(matrix)
            t1 = clock()
            gpu.score(matrix)
            t2 = clock()
            cpu_t.append(t1 - t0)
            gpu_t.append(t2 - t1)
        cpu_s.append(statistics.median(cpu_t))
        gpu_s.append(statistics.median(gpu_t))
    return Calibration(tuple(sizes), tuple(cpu_s), tuple(gpu_s), crossover(sizes, cpu_s, gpu_s))


def _short(provider: str) -> str:
    return provider.removesuffix("ExecutionProvider")


class HybridScorer:
    """Two scorers, one per provider; each call goes to one of them by its number of rows."""

    def __init__(
        self, cpu: Scorer, gpu: Scorer, *, min_batch: int, spec: FeatureSpec = DECLARED,
        name: str = "", metrics: ScorerMetrics | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        if min_batch < 1:
            raise ValueError(f"min_batch must be at least 1, got {min_batch}")
        self.cpu = cpu
        self.gpu = gpu
        self.min_batch = min_batch
        self.spec = spec
        self.name = name
        self.metrics = metrics
        self.calibration = calibration
        if metrics is not None:
            metrics.crossover(name, math.inf if min_batch == NEVER else min_batch)

    @property
    def active_provider(self) -> str:
        """`hybrid(CUDA>=N,CPU)`: the rule, since the provider changes per call."""
        bound = "never" if self.min_batch == NEVER else str(self.min_batch)
        return f"hybrid({_short(self.gpu.active_provider)}>={bound},{_short(self.cpu.active_provider)})"

    def warm_up(self, max_rows: int) -> None:
        """Warm the CPU session (the CUDA one was warmed per bucket when it was bound)."""
        warm = getattr(self.cpu, "warm_up", None)
        if warm is not None:
            warm(max_rows)

    def scorer_for(self, rows: int) -> Scorer:
        """The scorer a batch of `rows` rows goes to."""
        return self.gpu if rows >= self.min_batch else self.cpu

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Fraud probabilities, float32 [N], for a float32 [N, F] matrix."""
        check_input(matrix, self.spec.width)
        rows = matrix.shape[0]
        if rows == 0:
            return np.zeros(0, dtype=np.float32)
        scorer = self.scorer_for(rows)
        try:
            scores = scorer.score(matrix)
        except Exception:
            if scorer is not self.gpu:
                raise
            # A CUDA failure (a graph that cannot be captured on this thread, a device fault)
            # must not stop scoring: the CPU session scores the same rows inside the band.
            log.exception("model %s: CUDA scoring failed; every batch goes to the CPU from now",
                          self.name)
            self.min_batch = NEVER
            if self.metrics is not None:
                self.metrics.crossover(self.name, math.inf)
            scorer = self.cpu
            scores = scorer.score(matrix)
        if self.metrics is not None:
            self.metrics.scored(scorer.active_provider, rows)
        return scores


def hybrid(
    cpu: Scorer, gpu: BoundScorer, *, options: GpuOptions, spec: FeatureSpec = DECLARED,
    name: str = "", metrics: ScorerMetrics | None = None,
) -> HybridScorer:
    """A HybridScorer whose crossover is `options.min_batch`, else calibrated now (and logged)."""
    calibration = None
    if options.min_batch is None:
        calibration = calibrate(cpu, gpu, sizes=gpu.sizes, spec=spec,
                                repeats=options.calibration_repeats)
        min_batch = calibration.min_batch
        log.info("model %s: CUDA from batch %s (calibrated; %s)", name,
                 "never" if min_batch == NEVER else min_batch, calibration.describe())
    else:
        min_batch = options.min_batch
        gpu.warm_up(tuple(s for s in gpu.sizes if s >= min_batch or s == gpu.max_rows))
        log.info("model %s: CUDA from batch %d (FRAUDSTREAM_GPU_MIN_BATCH)", name, min_batch)
    return HybridScorer(cpu, gpu, min_batch=min_batch, spec=spec, name=name, metrics=metrics,
                        calibration=calibration)


def _bound(model: Path | bytes, *, device: Device, options: GpuOptions, spec: FeatureSpec,
           name: str) -> tuple[OnnxScorer, BoundScorer | None]:
    """The session `device` gives, and when it runs on CUDA, its IO-bound scorer (warmed up)."""
    graph = {"enable_cuda_graph": "1"} if options.cuda_graph else None
    try:
        session = OnnxScorer(model, device=device, spec=spec, name=name, cuda_options=graph)
    except Exception as exc:  # onnxruntime raises its own types; RuntimeError for missing CUDA
        if graph is None or "CUDA was required" in str(exc):
            raise
        log.warning("model %s: CUDA graphs refused (%s); running without them", name, exc)
        return _bound(model, device=device, spec=spec, name=name,
                      options=replace(options, cuda_graph=False))
    if session.active_provider != CUDA:
        return session, None
    bound = BoundScorer(session.session, device_type="cuda", max_rows=options.max_rows,
                        cuda_graph=options.cuda_graph, spec=spec)
    try:
        bound.warm_up()  # every bucket, largest first (graphs: captured here)
    except Exception as exc:
        if not options.cuda_graph:
            raise
        log.warning("model %s: CUDA graph capture failed (%s); running without graphs", name, exc)
        return _bound(model, device=device, spec=spec, name=name,
                      options=replace(options, cuda_graph=False))
    return session, bound


def build_scorer(
    model: Path | bytes, *, device: Device = "auto", gpu: GpuOptions | None = None,
    spec: FeatureSpec = DECLARED, name: str = "", metrics: ScorerMetrics | None = None,
) -> Scorer:
    """The scorer a worker runs: CPU only, or hybrid CPU/CUDA when CUDA loads.

    "cpu": one CPU session. "auto": CUDA when onnxruntime loads it, else the CPU session alone
    (exactly as before there was a hybrid). "cuda": CUDA or RuntimeError. With CUDA the result is
    a HybridScorer over a CPU session and an IO-bound CUDA session (FRAUDSTREAM_GPU_MIN_BATCH=1
    sends every batch to CUDA). A model onnxruntime cannot run whole on CUDA (a tree ensemble:
    placement.cpu_only_ops) is the CPU session under "auto" and refused under "cuda".
    """
    options = gpu or GpuOptions()
    if device == "cpu":
        return OnnxScorer(model, device="cpu", spec=spec, name=name, metrics=metrics)
    session, bound = _bound(model, device=device, options=options, spec=spec, name=name)
    if bound is None:
        session.metrics = metrics
        return session
    cpu = OnnxScorer(model, device="cpu", spec=spec, name=name)
    return hybrid(cpu, bound, options=options, spec=spec, name=name, metrics=metrics)
