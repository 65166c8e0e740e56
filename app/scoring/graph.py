"""The MLP as a hand-built ONNX graph whose every op has a CUDA kernel in onnxruntime.

Graph (opset 17, IR 8), input "features" float32 [N, F], output "score" float32 [N, 1]:

    Relu → Add 1 → Log → Sub mean → Div std    scaling: z = (log(1 + max(x, 0)) − μ) / σ
    Gemm → Relu → Gemm → Relu → … → Gemm → Sigmoid

The scaling is the one the classifier was trained on (trainer.PREPROCESSING): Relu maps the
−1 "none" sentinel of ms_since_prev (and any negative) to 0, so it becomes log(1) = 0 before
standardisation; counts, sums and amounts span 1 .. 10^12, which the log compresses. μ and σ are
the training rows' mean and standard deviation of the log values (σ = 1 where a column is
constant). Weights are stored as float32; nothing else (no wall clock, no library version)
enters the bytes, so the same weights always give the same file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.scoring.contract import (
    DECLARED,
    INPUT_NAME,
    META_FEATURES,
    META_PREPROCESSING,
    OUTPUT_NAME,
    FeatureSpec,
)

OPSET: Final = 17
IR_VERSION: Final = 8
#: Ops the exported graph may use: each has a float32 CUDA kernel in onnxruntime.
CUDA_OPS: Final = frozenset({
    "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Log", "Exp", "Max", "Min",
    "Clip", "Abs", "Neg", "Sqrt", "Reshape", "Flatten", "Identity", "Cast", "Tanh",
})
#: A tree model's ops (app.scoring.gbt): onnxruntime runs them on its CPU kernels, also inside a
#: CUDA session (TreeEnsembleClassifier has no CUDA kernel).
TREE_OPS: Final = frozenset({"TreeEnsembleClassifier", "Slice"})
#: Written into the model's metadata (META_PREPROCESSING), covered by the version hash.
PREPROCESSING: Final = "relu-log1p-standardize.v1"


def _const(name: str, value: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(value, dtype=np.float32), name=name)


def mlp_model(
    *,
    mean: np.ndarray,
    std: np.ndarray,
    weights: Sequence[np.ndarray],
    biases: Sequence[np.ndarray],
    spec: FeatureSpec = DECLARED,
) -> bytes:
    """The serialized ONNX model of scaling + MLP (ReLU hidden layers, sigmoid output)."""
    width = spec.width
    if mean.shape != (width,) or std.shape != (width,):
        raise ValueError(f"scaling vectors must have shape ({width},)")
    if len(weights) != len(biases) or not weights:
        raise ValueError("need one bias per weight matrix, at least one layer")
    if weights[0].shape[0] != width or weights[-1].shape[1] != 1:
        raise ValueError(f"layers must map {width} inputs to 1 output")
    inits = [_const("one", np.array(1.0)), _const("mean", mean), _const("std", std)]
    nodes = [
        helper.make_node("Relu", [INPUT_NAME], ["nonneg"], name="clip_sentinels"),
        helper.make_node("Add", ["nonneg", "one"], ["shifted"], name="plus_one"),
        helper.make_node("Log", ["shifted"], ["logged"], name="log1p"),
        helper.make_node("Sub", ["logged", "mean"], ["centred"], name="centre"),
        helper.make_node("Div", ["centred", "std"], ["h0"], name="scale"),
    ]
    last = len(weights)
    for i, (w, b) in enumerate(zip(weights, biases, strict=True), 1):
        if w.shape[1] != b.shape[0]:
            raise ValueError(f"layer {i}: weight {w.shape} and bias {b.shape} disagree")
        inits += [_const(f"W{i}", w), _const(f"b{i}", b)]
        out = f"z{i}" if i < last else "logit"
        nodes.append(helper.make_node("Gemm", [f"h{i - 1}", f"W{i}", f"b{i}"], [out],
                                      name=f"dense{i}"))
        if i < last:
            nodes.append(helper.make_node("Relu", [out], [f"h{i}"], name=f"relu{i}"))
    nodes.append(helper.make_node("Sigmoid", ["logit"], [OUTPUT_NAME], name="probability"))
    graph = helper.make_graph(
        nodes, "fraudstream_mlp",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", 1])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="fraudstream", producer_version="1")
    model.ir_version = IR_VERSION
    model.doc_string = "fraudstream card-fraud MLP: P(fraud | features as of the transaction)."
    helper.set_model_props(model, {META_FEATURES: ",".join(spec.names),
                                   META_PREPROCESSING: PREPROCESSING})
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def graph_ops(model_bytes: bytes) -> list[str]:
    """Every node's op type, in graph order."""
    return [node.op_type for node in onnx.load_from_string(model_bytes).graph.node]


def foreign_ops(model_bytes: bytes) -> list[str]:
    """Ops of the graph that are not in CUDA_OPS (empty when the whole graph can run on CUDA)."""
    model = onnx.load_from_string(model_bytes)
    bad = [n.op_type for n in model.graph.node if n.op_type not in CUDA_OPS or n.domain]
    return sorted(set(bad))


def model_metadata(model_bytes: bytes) -> dict[str, str]:
    """The model's metadata_props as a dict."""
    return {p.key: p.value for p in onnx.load_from_string(model_bytes).metadata_props}
