"""IO binding: a session's calls on buffers preallocated per bucket size (optionally CUDA graphs).

A plain `session.run` allocates the input and output tensors on the device and builds the
feeds in Python on every call; on CUDA that is part of a call's fixed cost (docs/performance.md,
"On a GPU").
`BoundScorer` allocates, once per bucket size (powers of two up to `max_rows`, and `max_rows`),
an input [b, F] and an output [b, 1] tensor on the session's device and an IOBinding over them.
A batch of n rows is staged into the smallest bucket b >= n (rows n..b keep earlier, finite
values and their scores are dropped), copied into the bucket's input in place, run, and the
first n scores are read back. Larger batches are scored in chunks of `max_rows`.

Fixed shapes and fixed addresses per bucket are what onnxruntime's CUDA graphs need: with
`cuda_graph=True` (a session created with the CUDA provider option `enable_cuda_graph=1`) every
bucket is captured once as its own graph (run option `gpu_graph_id`) and replayed afterwards.
The EP keeps graphs per thread: a thread that did not warm up captures again on its first calls.
The same class runs on device "cpu", which is how it is tested without a GPU.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import onnxruntime as ort

from app.scoring.contract import DECLARED, INPUT_NAME, OUTPUT_NAME, FeatureSpec
from app.scoring.scorer import check_input

DeviceType = Literal["cpu", "cuda"]
#: onnxruntime's run option naming the CUDA graph a run captures or replays.
GRAPH_ID_KEY: Final = "gpu_graph_id"


def bucket_sizes(max_rows: int) -> tuple[int, ...]:
    """Powers of two below `max_rows`, then `max_rows`: the shapes a bound session runs at."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    sizes = []
    size = 1
    while size < max_rows:
        sizes.append(size)
        size *= 2
    sizes.append(max_rows)
    return tuple(sizes)


@dataclass(slots=True)
class _Bucket:
    rows: int
    inputs: Any  # ort.OrtValue [rows, F] on the device
    outputs: Any  # ort.OrtValue [rows, 1] on the device
    binding: Any  # ort.IOBinding over the two
    run_options: Any  # ort.RunOptions (the graph id when graphs are on)


class BoundScorer:
    """Scores through IO binding on preallocated per-bucket device buffers.

    Not batch-invariant on CUDA (neither is a plain CUDA run): a row's score may differ in the
    last bits with the bucket it lands in, which the oracle's boundary band covers.
    """

    def __init__(
        self, session: ort.InferenceSession, *, device_type: DeviceType = "cuda",
        device_id: int = 0, max_rows: int = 4096, cuda_graph: bool = False,
        spec: FeatureSpec = DECLARED,
    ) -> None:
        self.session = session
        self.device_type: DeviceType = device_type
        self.device_id = device_id
        self.spec = spec
        self.cuda_graph = cuda_graph
        self.sizes = bucket_sizes(max_rows)
        self.max_rows = max_rows
        self._provider: str = session.get_providers()[0]
        self._staging = np.zeros((max_rows, spec.width), dtype=np.float32)
        self._buckets: dict[int, _Bucket] = {}
        self._lock = threading.Lock()

    @property
    def active_provider(self) -> str:
        """The execution provider the session runs on."""
        return self._provider

    def bucket_for(self, rows: int) -> int:
        """The bucket size a batch of `rows` (1..max_rows) runs at."""
        for size in self.sizes:
            if size >= rows:
                return size
        raise ValueError(f"{rows} rows exceed max_rows {self.max_rows}")

    def _bucket(self, rows: int) -> _Bucket:
        bucket = self._buckets.get(rows)
        if bucket is None:
            width = self.spec.width
            inputs = ort.OrtValue.ortvalue_from_shape_and_type(
                [rows, width], np.float32, self.device_type, self.device_id)
            inputs.update_inplace(self._staging[:rows])  # finite from the start
            outputs = ort.OrtValue.ortvalue_from_shape_and_type(
                [rows, 1], np.float32, self.device_type, self.device_id)
            binding = self.session.io_binding()
            binding.bind_ortvalue_input(INPUT_NAME, inputs)
            binding.bind_ortvalue_output(OUTPUT_NAME, outputs)
            options = ort.RunOptions()
            if self.cuda_graph:
                options.add_run_config_entry(GRAPH_ID_KEY, str(self.sizes.index(rows)))
            bucket = _Bucket(rows, inputs, outputs, binding, options)
            self._buckets[rows] = bucket
        return bucket

    def warm_up(self, sizes: tuple[int, ...] | None = None, *, runs: int = 3) -> None:
        """Allocate (and with graphs, capture) the buckets of `sizes` (default: all) now.

        Largest first: onnxruntime's CUDA EP counts warm-up runs per thread, not per graph, so
        a bucket's first run may already be captured, and no device memory can be allocated
        while capturing: the largest run fills the arena that the smaller ones reuse. `runs` (3)
        covers the EP's regular runs before a capture (1 or 2 depending on the version).
        """
        buckets = {self.bucket_for(size) for size in (self.sizes if sizes is None else sizes)}
        for size in sorted(buckets, reverse=True):
            for _ in range(runs):
                self._run(np.zeros((size, self.spec.width), dtype=np.float32))

    def _run(self, matrix: np.ndarray) -> np.ndarray:
        rows = matrix.shape[0]
        size = self.bucket_for(rows)
        bucket = self._bucket(size)
        if rows == size:
            bucket.inputs.update_inplace(np.ascontiguousarray(matrix))
        else:
            self._staging[:rows] = matrix
            bucket.inputs.update_inplace(self._staging[:size])
        self.session.run_with_iobinding(bucket.binding, bucket.run_options)
        (out,) = bucket.binding.copy_outputs_to_cpu()
        # a copy: the caller keeps its scores while the next call reuses the buffers
        return np.array(np.asarray(out, dtype=np.float32).reshape(size)[:rows])

    def score(self, matrix: np.ndarray) -> np.ndarray:
        """Fraud probabilities, float32 [N], for a float32 [N, F] matrix."""
        check_input(matrix, self.spec.width)
        rows = matrix.shape[0]
        if rows == 0:
            return np.zeros(0, dtype=np.float32)
        with self._lock:
            if rows <= self.max_rows:
                return self._run(matrix)
            return np.concatenate([self._run(matrix[i:i + self.max_rows])
                                   for i in range(0, rows, self.max_rows)])
