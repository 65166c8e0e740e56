"""Tree models score on the CPU: their ai.onnx.ml nodes have no CUDA kernel in onnxruntime."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from app.scoring.hybrid import build_scorer
from app.scoring.placement import ML_DOMAIN, cpu_only_ops
from app.scoring.scorer import CPU, CUDA, OnnxScorer
from app.settings import SHIPPED_MODEL_DIR

SHIPPED = sorted(p for p in SHIPPED_MODEL_DIR.glob("*/model.onnx"))


def onnx_parse(data: bytes) -> tuple[str, ...]:
    """The reference: `onnx`'s own parse of the same bytes."""
    graph = onnx.load_from_string(data).graph
    return tuple(sorted({n.op_type for n in graph.node if n.domain == ML_DOMAIN}))


def kind(path: Path) -> str:
    return path.parent.name.split("-")[0]


def test_the_shipped_models_are_one_tree_ensemble_and_one_mlp() -> None:
    assert sorted(kind(p) for p in SHIPPED) == ["lgbm", "mlp"]


@pytest.mark.parametrize("path", SHIPPED, ids=kind)
def test_cpu_only_ops_agrees_with_onnx_on_the_shipped_models(path: Path) -> None:
    data = path.read_bytes()
    expected = ("TreeEnsembleClassifier",) if kind(path) == "lgbm" else ()
    assert cpu_only_ops(data) == onnx_parse(data) == expected


def test_cpu_only_ops_reads_every_node_and_only_the_ml_domain() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Scaler", ["a"], ["b"], domain=ML_DOMAIN, scale=[1.0, 2.0]),
        helper.make_node("Normalizer", ["b"], ["c"], domain=ML_DOMAIN, norm="MAX"),
        helper.make_node("Scaler", ["c"], ["d"], domain=ML_DOMAIN, offset=[0.5, 0.5]),
        helper.make_node("Gelu", ["d"], ["y"], domain="com.microsoft"),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(ML_DOMAIN, 3)])
    data = model.SerializeToString()
    assert cpu_only_ops(data) == onnx_parse(data) == ("Normalizer", "Scaler")


@pytest.mark.parametrize("data", [b"\x3a\x05ab", b"\x3a", b"\xff" * 11, b"\x3f\x00"],
                         ids=["field-past-end", "no-length", "overlong-varint", "wire-type-7"])
def test_bytes_that_are_not_a_model_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not an ONNX model"):
        cpu_only_ops(data)


def tree_model() -> Path:
    return next(p for p in SHIPPED if kind(p) == "lgbm")


def test_cuda_required_of_a_tree_model_is_refused_naming_the_node() -> None:
    with pytest.raises(RuntimeError, match="no CUDA kernel for its TreeEnsembleClassifier node"):
        OnnxScorer(tree_model(), device="cuda")
    with pytest.raises(RuntimeError, match="TreeEnsembleClassifier"):
        build_scorer(tree_model().read_bytes(), device="cuda", name="trees")


def test_auto_builds_a_tree_model_on_the_cpu_alone() -> None:
    scorer = build_scorer(tree_model(), device="auto", name="trees")
    assert isinstance(scorer, OnnxScorer)
    assert scorer.requested == (CPU,) and scorer.active_provider == CPU


def test_auto_still_asks_cuda_for_a_model_it_can_run() -> None:
    mlp = next(p for p in SHIPPED if kind(p) == "mlp")
    assert OnnxScorer(mlp, device="auto").requested == (CUDA, CPU)
