"""Gradient-boosted trees: fit LightGBM on the served float32 rows, export it to the ONNX contract.

Graph (opset 17 + ai.onnx.ml), input "features" float32 [N, F], output "score" float32 [N, 1]:

    TreeEnsembleClassifier (post_transform LOGISTIC) → probabilities [N, 2] → Slice [:, 1:2]

The tree node is onnxmltools' conversion (`convert_lightgbm`, zipmap=False); its label output is
left unread and the converter's Identity/Cast/Mul-by-one tail is dropped. Trees read the raw
features: no scaling, the −1 "none" sentinel is just a value below 0.

Thresholds: LightGBM splits on `x <= t` with t a float64 (about the midpoint between two training
values), while onnxruntime compares the float32 input with a float32 threshold. Rounding t to
the nearest float32 can round it up onto the next training value and send that value down the
other branch (measured: a column of adjacent float32 values, 13,713 of 20,000 rows off by up to
0.86). The export therefore rounds every threshold *down* to a float32 f ≤ t first: for a float32
x, x ≤ t ⇔ x ≤ f, so the exported trees take exactly LightGBM's branches on every served row.
What remains is arithmetic: leaf values are stored as float32 and summed in float32, then the
sigmoid; EXPORT_TOLERANCE bounds it.

Determinism: `deterministic=True`, `num_threads` fixed (1 by default), `force_row_wise=True`
and the seed give the same trees for the same rows; the ONNX bytes hold only the graph, the
thresholds and leaf values, the feature order and the preprocessing id (no library version,
no producer string), so the same rows and parameters give a byte-identical model.onnx.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

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
from app.scoring.graph import IR_VERSION, OPSET

log = logging.getLogger(__name__)

#: Largest |ONNX − LightGBM predict_proba| accepted on the checked rows: the MLP's bound and
#: policy.BOUNDARY_EPS. With the thresholds rounded down (module docstring) every row takes
#: LightGBM's leaves, so what differs is float32 leaf values summed in float32 (~1e-7 relative
#: per tree, a random walk over trees) through the sigmoid (slope ≤ 0.25): measured 2.3e-7 with
#: 100 trees and 5.7e-7 with 1,000. A branch taken wrongly moves a score by a whole leaf
#: (1e-3 and more), far above the bound, so the check tells an export bug from rounding.
EXPORT_TOLERANCE: Final = 1e-5
#: The ai.onnx.ml opset of the tree node: onnxmltools writes TreeEnsembleClassifier v1, which
#: every onnxruntime 1.x runs (ai.onnx.ml 5 deprecates it for TreeEnsemble).
ML_OPSET: Final = 1
ML_DOMAIN: Final = "ai.onnx.ml"
#: Written into the model's metadata (META_PREPROCESSING): trees read the raw float32 features.
PREPROCESSING: Final = "raw-float32.v1"
#: onnxmltools' own opset ceiling for the converter's helper nodes (dropped afterwards).
_CONVERTER_OPSET: Final = 15


@dataclass(frozen=True, kw_only=True, slots=True)
class GbtParams:
    """LightGBM's hyper-parameters (binary objective); the seed is passed beside them."""

    n_estimators: int = 300
    learning_rate: float = 0.05
    num_leaves: int = 31
    #: None: no depth limit (LightGBM's -1); num_leaves bounds the trees.
    max_depth: int | None = None
    min_child_samples: int = 20
    #: Row share drawn per tree (LightGBM's bagging_fraction, re-drawn every tree when < 1).
    subsample: float = 1.0
    #: Column share drawn per tree (feature_fraction).
    colsample_bytree: float = 1.0
    #: Weight of the fraud class; None: 1 (unweighted).
    scale_pos_weight: float | None = None
    reg_lambda: float = 0.0
    #: Fixed thread count: part of the determinism (histogram sums follow the threads).
    num_threads: int = 1

    def __post_init__(self) -> None:
        if self.n_estimators < 1 or self.num_leaves < 2 or self.min_child_samples < 1:
            raise ValueError("n_estimators >= 1, num_leaves >= 2 and min_child_samples >= 1 "
                             "are required")
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"max_depth must be positive or None, got {self.max_depth}")
        if not self.learning_rate > 0.0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        for name in ("subsample", "colsample_bytree"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if self.scale_pos_weight is not None and not self.scale_pos_weight > 0.0:
            raise ValueError(f"scale_pos_weight must be positive, got {self.scale_pos_weight}")
        if self.reg_lambda < 0.0 or self.num_threads < 1:
            raise ValueError("reg_lambda >= 0 and num_threads >= 1 are required")

    def as_dict(self) -> dict[str, Any]:
        """The parameters as the model card records them."""
        return asdict(self)

    def lightgbm_kwargs(self, seed: int) -> dict[str, Any]:
        """LGBMClassifier's keyword arguments: these parameters plus the determinism switches."""
        return {
            "objective": "binary", "n_estimators": self.n_estimators,
            "learning_rate": self.learning_rate, "num_leaves": self.num_leaves,
            "max_depth": -1 if self.max_depth is None else self.max_depth,
            "min_child_samples": self.min_child_samples,
            "subsample": self.subsample, "subsample_freq": 1 if self.subsample < 1.0 else 0,
            "colsample_bytree": self.colsample_bytree,
            "scale_pos_weight": 1.0 if self.scale_pos_weight is None else self.scale_pos_weight,
            "reg_lambda": self.reg_lambda, "random_state": seed, "n_jobs": self.num_threads,
            "deterministic": True, "force_row_wise": True, "verbosity": -1,
            # the features are never NaN (features_matrix refuses them): no split may treat a
            # value as missing, so `x <= threshold` is each node's whole rule (see export)
            "use_missing": False, "zero_as_missing": False,
        }


@dataclass(frozen=True, slots=True)
class GbtModel:
    """A fitted and exported GBT: the ONNX bytes, the card's model/training parts, the library
    model and how far the export is from it on the checked rows."""

    onnx_bytes: bytes
    model_card: dict[str, Any]
    training_card: dict[str, Any]
    export_max_abs_diff: float
    classifier: Any = field(repr=False)


def fit_lgbm(
    matrix: np.ndarray, labels: np.ndarray, params: GbtParams, *, seed: int = 0,
    spec: FeatureSpec = DECLARED,
) -> Any:
    """A fitted lightgbm.LGBMClassifier on float32 model inputs (spec order), labels 0/1."""
    import lightgbm

    _check_rows(matrix, labels, spec)
    classifier = lightgbm.LGBMClassifier(**params.lightgbm_kwargs(seed))
    # no feature names: the sklearn wrapper would then warn on every numpy predict_proba; the
    # card maps the booster's columns to spec.names by position
    classifier.fit(matrix, labels, categorical_feature=[])
    return classifier


def predict_proba(classifier: Any, matrix: np.ndarray) -> np.ndarray:
    """LightGBM's P(fraud), float64 [N], on the float32 rows as served."""
    return np.asarray(classifier.predict_proba(matrix)[:, 1], dtype=np.float64)


def float32_floor(value: float) -> float:
    """The largest float32 that is ≤ value (as a float): x ≤ value ⇔ x ≤ it, for float32 x."""
    with np.errstate(over="ignore"):
        rounded = np.float32(value)
    if float(rounded) > value:
        rounded = np.nextafter(rounded, np.float32(-np.inf))
    return float(rounded)


def float32_booster(booster: Any) -> Any:
    """A copy of a LightGBM booster whose thresholds are rounded down to float32.

    It predicts exactly as `booster` on float32 inputs, and its thresholds survive the float32
    ONNX attribute unchanged. Categorical splits and splits with a missing-value rule (neither
    can occur with no categorical feature and use_missing=False) are refused: `x <= t` must be
    the whole decision.
    """
    import lightgbm

    lines = booster.model_to_string().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("decision_type="):
            kinds = {int(v) for v in line.removeprefix("decision_type=").split()}
            if any(k & 1 or (k >> 2) & 3 for k in kinds):
                raise ValueError(f"only plain numerical splits can be exported, got "
                                 f"decision types {sorted(kinds)}")
        elif line.startswith("threshold="):
            values = (float32_floor(float(v)) for v in line.removeprefix("threshold=").split())
            lines[i] = "threshold=" + " ".join(repr(v) for v in values)
    # tree_sizes holds each tree's length in characters, which the new thresholds change;
    # without it LightGBM reads the trees one after the other.
    text = "\n".join(line for line in lines if not line.startswith("tree_sizes="))
    return lightgbm.Booster(model_str=text)


def _tree_node(classifier: Any, spec: FeatureSpec) -> onnx.NodeProto:
    """onnxmltools' TreeEnsembleClassifier node for the classifier's float32-floored booster."""
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    converted = convert_lightgbm(
        float32_booster(classifier.booster_), name="fraudstream_gbt", zipmap=False,
        initial_types=[(INPUT_NAME, FloatTensorType([None, spec.width]))],
        target_opset=_CONVERTER_OPSET)
    trees = [n for n in converted.graph.node if n.op_type == "TreeEnsembleClassifier"]
    if len(trees) != 1 or trees[0].domain != ML_DOMAIN:
        raise ValueError(f"expected one {ML_DOMAIN} TreeEnsembleClassifier from onnxmltools, "
                         f"got {[n.op_type for n in converted.graph.node]}")
    node = trees[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("post_transform") != b"LOGISTIC" or list(attrs["classlabels_int64s"]) != [0, 1]:
        raise ValueError("expected a binary classifier with a LOGISTIC post-transform, got "
                         f"{attrs.get('post_transform')!r}, classes "
                         f"{attrs.get('classlabels_int64s')}")
    tree = onnx.NodeProto()
    tree.CopyFrom(node)
    del tree.input[:], tree.output[:]
    tree.input.append(INPUT_NAME)
    tree.output.extend(["label", "probabilities"])
    tree.name = "trees"
    return tree


def export_lgbm(classifier: Any, *, spec: FeatureSpec = DECLARED) -> bytes:
    """The fitted classifier as serialized ONNX bytes that satisfy the model contract."""
    inits = [numpy_helper.from_array(np.array([v], dtype=np.int64), name=n)
             for n, v in (("fraud_from", 1), ("fraud_to", 2), ("class_axis", 1))]
    nodes = [
        _tree_node(classifier, spec),
        helper.make_node("Slice", ["probabilities", "fraud_from", "fraud_to", "class_axis"],
                         [OUTPUT_NAME], name="fraud_probability"),
    ]
    graph = helper.make_graph(
        nodes, "fraudstream_gbt",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", spec.width])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", 1])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid(ML_DOMAIN, ML_OPSET)],
                              producer_name="fraudstream", producer_version="1")
    model.ir_version = IR_VERSION
    model.doc_string = ("fraudstream card-fraud gradient-boosted trees: "
                        "P(fraud | features as of the transaction).")
    helper.set_model_props(model, {META_FEATURES: ",".join(spec.names),
                                   META_PREPROCESSING: PREPROCESSING})
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def export_difference(onnx_bytes: bytes, classifier: Any, matrix: np.ndarray, *,
                      spec: FeatureSpec = DECLARED) -> float:
    """Largest |served score − LightGBM predict_proba| over float32 rows (CPU session)."""
    from app.scoring.scorer import OnnxScorer

    if len(matrix) == 0:
        return 0.0
    served = OnnxScorer(onnx_bytes, device="cpu", spec=spec, name="gbt-export-check")
    got = served.score(matrix).astype(np.float64)
    return float(np.max(np.abs(got - predict_proba(classifier, matrix))))


def train_gbt(
    matrix: np.ndarray, labels: np.ndarray, params: GbtParams | None = None, *, seed: int = 0,
    check_rows: np.ndarray | None = None, spec: FeatureSpec = DECLARED,
) -> GbtModel:
    """Fit LightGBM on float32 rows in `spec` order (FEATURE_NAMES), export it, check the export.

    The export is compared with predict_proba on the training rows and on `check_rows` (the
    evaluation rows, when there are any); RuntimeError (an export bug, as for the MLP) when
    either differs by more than EXPORT_TOLERANCE; ValueError for rows or labels it cannot fit.
    The returned card parts name the algorithm, its parameters, the seed, the export check and
    the trees' gain per feature (the rest of a card, thresholds and evaluation figures, is the
    trainer's: trainer.train_model with TrainConfig(algorithm="lgbm")).
    """
    params = params or GbtParams()
    classifier = fit_lgbm(matrix, labels, params, seed=seed, spec=spec)
    onnx_bytes = export_lgbm(classifier, spec=spec)
    checked = matrix if check_rows is None else np.concatenate([matrix, check_rows])
    diff = export_difference(onnx_bytes, classifier, checked, spec=spec)
    if diff > EXPORT_TOLERANCE:
        raise RuntimeError(f"exported trees differ from LightGBM by {diff:.3g} "
                         f"(> {EXPORT_TOLERANCE}): export bug")
    booster = classifier.booster_
    gain = booster.feature_importance(importance_type="gain")
    model_card = {
        "kind": "lgbm", "algorithm": "lgbm",
        "estimator": "lightgbm.LGBMClassifier (gradient-boosted trees, binary objective)",
        "trees": int(booster.num_trees()), "hyperparameters": params.as_dict(),
        "opset": OPSET, "ml_opset": ML_OPSET, "ir_version": IR_VERSION,
        "execution": "onnxruntime CPU kernel: ai.onnx.ml TreeEnsembleClassifier has no CUDA "
                     "kernel (a CUDA session runs it on the CPU)",
        "preprocessing": {
            "id": PREPROCESSING,
            "graph": "TreeEnsembleClassifier (LOGISTIC) -> Slice probabilities[:, 1:2]",
            "formula": "trees on the raw float32 features; each threshold t is the largest "
                       "float32 <= LightGBM's float64 threshold, so x <= t is LightGBM's branch",
        },
    }
    training_card = {
        "seed": seed, "estimator": "lightgbm.LGBMClassifier", "config": params.as_dict(),
        "lightgbm_params": params.lightgbm_kwargs(seed), "iterations": int(booster.num_trees()),
        "export_checked_rows": int(len(checked)), "export_tolerance": EXPORT_TOLERANCE,
        "feature_importance_gain": {n: float(g) for n, g in zip(spec.names, gain, strict=True)},
    }
    return GbtModel(onnx_bytes, model_card, training_card, diff, classifier)


def library_versions() -> Mapping[str, str]:
    """Versions of the libraries that fit and convert the trees."""
    import lightgbm
    import onnxmltools

    return {"lightgbm": lightgbm.__version__, "onnxmltools": onnxmltools.__version__}


def _check_rows(matrix: np.ndarray, labels: np.ndarray, spec: FeatureSpec) -> None:
    if matrix.dtype != np.float32 or matrix.ndim != 2 or matrix.shape[1] != spec.width:
        raise ValueError(f"training rows must be float32 (N, {spec.width}) in the declared "
                         f"feature order, got {matrix.dtype} {matrix.shape}")
    if labels.shape != (len(matrix),):
        raise ValueError(f"need one label per row: {labels.shape} labels, {len(matrix)} rows")
    values = set(np.unique(labels).tolist())
    if not values <= {0, 1} or len(values) < 2:
        raise ValueError(f"labels must hold both 0 and 1, got {sorted(values)}")
