"""The ONNX scorer: one onnxruntime session, the one feature-vector conversion, batch scoring.

Determinism: the CPU session runs with one intra-op and one inter-op thread, sequentially,
so a row's score does not depend on the batch it is scored in (measured: bit-identical for
batches of 1/8/64/256 and for the whole log at once; tests/unit/scoring asserts it). The
live worker's micro-batches and the offline oracle's single call therefore agree exactly
on CPU (across CPU models, kernels with and without FMA may differ in the last bits). On
CUDA, TF32 is switched off (onnxruntime's CUDA provider enables it by default; its 10-bit
products could move scores far more than policy.BOUNDARY_EPS); cuBLAS may still differ from
the CPU by a few ulps, which is what the oracle's boundary flags are for. Measured on an H200
(docs/performance.md, "On a GPU"): 50,000 real vectors, largest difference 1.55e-6, no
decision outside the boundary band; CUDA scores are not bit-identical across batch sizes, which the boundary
flags also cover.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import numpy as np
import onnxruntime as ort

from app.features.declaration import FeatureValue
from app.features.state import fill_matrix as _fill
from app.scoring.contract import DECLARED, OUTPUT_NAME, FeatureSpec, check_io, check_metadata
from app.scoring.metrics import ScorerMetrics
from app.scoring.placement import cpu_only_ops

log = logging.getLogger(__name__)

#: "auto": CUDA when onnxruntime can load it, else CPU; "cpu": CPU only (the oracle);
#: "cuda": CUDA or refuse to start (RuntimeError).
Device = Literal["auto", "cpu", "cuda"]
CUDA: Final = "CUDAExecutionProvider"
CPU: Final = "CPUExecutionProvider"
_CUDA_OPTIONS: Final = {"use_tf32": "0"}


class Scorer(Protocol):
    """Scores a float32 [N, F] matrix; what the worker and the oracle depend on."""

    @property
    def active_provider(self) -> str: ...

    def score(self, matrix: np.ndarray) -> np.ndarray: ...


def features_matrix(
    vectors: Sequence[Sequence[FeatureValue]], *, spec: FeatureSpec = DECLARED
) -> np.ndarray:
    """Feature vectors (FEATURE_NAMES order, ints and floats) as the model input, float32 [N, F].

    The one conversion, shared by the online and offline paths: values go through float64
    (exact for every integer below 2**53 and every float) and are then rounded once to float32.
    The compiled state's `fill_matrix` converts each value straight into the float32 array
    (0.1 µs a row against 0.6 for numpy's pass over the flattened values); a value it does not
    take (a numpy scalar, say) sends the batch through that numpy pass instead, same result.
    """
    rows = len(vectors)
    if rows == 0:
        return np.zeros((0, spec.width), dtype=np.float32)
    widths = set(map(len, vectors))
    if widths != {spec.width}:
        shape = (rows, sorted(widths)) if len(widths) > 1 else (rows, widths.pop())
        raise ValueError(f"feature vectors have shape {shape}, expected (N, {spec.width})")
    if _fill is not None:
        out = np.empty((rows, spec.width), dtype=np.float32)
        try:
            bad = _fill(vectors, out)
        except TypeError:
            pass  # not plain ints and floats: numpy's conversion below decides
        else:
            if bad >= 0:
                raise ValueError(f"feature vector {bad} holds a non-finite value")
            return out
    wide = np.fromiter(chain.from_iterable(vectors), dtype=np.float64, count=rows * spec.width)
    wide = wide.reshape(rows, spec.width)
    if not np.isfinite(wide).all():
        row = int(np.flatnonzero(~np.isfinite(wide).all(axis=1))[0])
        raise ValueError(f"feature vector {row} holds a non-finite value")
    return wide.astype(np.float32)


def check_input(matrix: np.ndarray, width: int) -> None:
    """Refuse anything but a float32 [N, width] matrix, naming what came instead."""
    if matrix.dtype != np.float32 or matrix.ndim != 2 or matrix.shape[1] != width:
        raise ValueError(f"model input must be float32 (N, {width}), got "
                         f"{matrix.dtype} {matrix.shape}")


def session_options() -> ort.SessionOptions:
    """Single-threaded, sequential execution: batch-size independent results, no core contention."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return opts


def _providers(device: Device, cuda_options: Mapping[str, str] | None = None) -> list[Any]:
    if device == "cpu":
        return [CPU]
    return [(CUDA, {**_CUDA_OPTIONS, **(cuda_options or {})}), CPU]


def _cuda_or_cpu(model: bytes, device: Device, name: str) -> Device:
    """`device`, or "cpu" when the model holds nodes onnxruntime runs on the CPU only (a tree
    ensemble): on a CUDA session they would run on the CPU anyway, behind device copies.
    "cuda" asked of such a model is refused (RuntimeError), naming the nodes."""
    cpu_only = cpu_only_ops(model)
    if not cpu_only:
        return device
    reason = (f"onnxruntime has no CUDA kernel for its {', '.join(cpu_only)} "
              f"node{'s' if len(cpu_only) > 1 else ''}")
    if device == "cuda":
        raise RuntimeError(f"model {name}: CUDA was required but {reason}")
    log.info("model %s: scoring on the CPU: %s", name, reason)
    return "cpu"


class OnnxScorer:
    """One onnxruntime InferenceSession over a model whose I/O matches the feature declaration.

    Create one per process per model version (ModelRegistry caches them) and reuse it: a
    session is thread-safe for `run` and costs milliseconds to build. `cuda_options` are added
    to the CUDA provider's options (`enable_cuda_graph` for a session that only
    binding.BoundScorer runs); `metrics`, when given, counts each call's provider and rows.
    """

    def __init__(
        self, model: Path | bytes, *, device: Device = "auto", spec: FeatureSpec = DECLARED,
        name: str = "", cuda_options: Mapping[str, str] | None = None,
        metrics: ScorerMetrics | None = None,
    ) -> None:
        source = model if isinstance(model, bytes) else str(model)
        self.name = name or (model.parent.name if isinstance(model, Path) else "in-memory")
        self.spec = spec
        if device != "cpu":  # the bytes read once: for the node check and the session
            source = source if isinstance(source, bytes) else Path(source).read_bytes()
            device = _cuda_or_cpu(source, device, self.name)
        self.requested: tuple[str, ...] = (CPU,) if device == "cpu" else (CUDA, CPU)
        if device == "auto" and "CUDAExecutionProvider" in ort.get_available_providers():
            # Without CUDA libraries onnxruntime prints an error before falling back; the
            # fallback is expected in "auto" and we log the provider we really got below.
            ort.set_default_logger_severity(4)
        try:
            self.session = ort.InferenceSession(source, session_options(),
                                                providers=_providers(device, cuda_options))
        finally:
            ort.set_default_logger_severity(2)
        check_io(self.session.get_inputs(), self.session.get_outputs(), spec=spec, model=self.name)
        check_metadata(self.session.get_modelmeta().custom_metadata_map, spec=spec,
                       model=self.name)
        # onnxruntime-gpu silently falls back to CPU when the CUDA libraries are missing:
        # what runs is what the session reports, never what was asked for.
        self._provider: str = self.session.get_providers()[0]
        if device == "cuda" and self._provider != CUDA:
            raise RuntimeError(f"model {self.name}: CUDA was required but onnxruntime runs it on "
                               f"{self._provider} (CUDA/cuDNN libraries missing?)")
        level = logging.WARNING if device == "auto" and self._provider != CUDA else logging.INFO
        log.log(level, "model %s loaded: provider %s (requested %s)", self.name, self._provider,
                ", ".join(self.requested))
        self._input = self.session.get_inputs()[0].name
        self.metrics = metrics

    @property
    def active_provider(self) -> str:
        """The execution provider the session actually runs on."""
        return self._provider

    def warm_up(self, max_rows: int) -> None:
        """Run the session once per power-of-two batch size up to `max_rows` (uncounted), so
        that the first real batches pay no first-call allocation."""
        rows = 1
        while True:
            self.session.run([OUTPUT_NAME], {
                self._input: np.zeros((min(rows, max_rows), self.spec.width), dtype=np.float32)})
            if rows >= max_rows:
                return
            rows *= 2

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Fraud probabilities, float32 [N], for a float32 [N, F] matrix from `features_matrix`."""
        check_input(matrix, self.spec.width)
        if matrix.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        (out,) = self.session.run([OUTPUT_NAME], {self._input: matrix})
        if self.metrics is not None:
            self.metrics.scored(self._provider, matrix.shape[0])
        return np.asarray(out, dtype=np.float32).reshape(matrix.shape[0])
