"""Training: fit a model on the earlier days, export it to ONNX, evaluate it on the later days.

Two algorithms (TrainConfig.algorithm): "mlp" (below) and "lgbm", LightGBM's gradient-boosted
trees (app.scoring.gbt, which fits, exports and checks them). Both export to the same contract
and are served by the same scorer; this module orchestrates: split, fit, check, evaluate, card.

The MLP is a scikit-learn Pipeline (log1p of the non-negative part → StandardScaler →
MLPClassifier with ReLU hidden layers and a logistic output), fitted on exactly the float32
values the worker serves (scorer.features_matrix). `graph.mlp_model` rebuilds the same
function in ONNX; training refuses to finish unless the exported graph reproduces
predict_proba within EXPORT_TOLERANCE on every evaluation row. Evaluation metrics and
thresholds come from the exported graph's scores (the artifact that is served), not sklearn's.

Determinism: MLPClassifier draws its initial weights and its mini-batch shuffles from
`random_state=seed`; BLAS runs single-threaded while fitting; the ONNX bytes hold only the
graph and float32 weights. Same training table + config → byte-identical model.onnx.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from hashlib import sha256
from typing import Any, Final, Literal

import numpy as np
import pyarrow as pa

from app.scoring import evaluation
from app.scoring.card import CARD_SCHEMA, MODEL_FILE
from app.scoring.contract import DECLARED, INPUT_DTYPE, INPUT_NAME, OUTPUT_NAME
from app.scoring.dataset import FINGERPRINT_RULE, labelled_rows, time_split
from app.scoring.drift_reference import CARD_KEY as DRIFT_KEY
from app.scoring.drift_reference import build_reference
from app.scoring.gbt import GbtParams, train_gbt
from app.scoring.gbt import library_versions as gbt_library_versions
from app.scoring.graph import IR_VERSION, OPSET, PREPROCESSING, mlp_model
from app.scoring.scorer import OnnxScorer

log = logging.getLogger(__name__)

#: The fitting algorithm: the scikit-learn MLP or LightGBM's gradient-boosted trees.
Algorithm = Literal["mlp", "lgbm"]
ALGORITHMS: Final[tuple[Algorithm, ...]] = ("mlp", "lgbm")
#: The MLP's export check (the trees' is app.scoring.gbt.EXPORT_TOLERANCE).
EXPORT_TOLERANCE: Final = 1e-5
#: What a model's drift reference is binned from (its card says so).
REFERENCE_SOURCE: Final = "training rows (ts_ms < data.split.boundary_ts_ms), as served"


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainConfig:
    """Everything the fitted model depends on besides the data.

    `hidden` .. `max_iter` apply to the MLP, `gbt` to the trees; the card records only the
    algorithm's own.
    """

    algorithm: Algorithm = "mlp"
    seed: int = 0
    eval_fraction: float = 0.3
    hidden: tuple[int, ...] = (16, 8)
    alpha: float = 1e-4
    batch_size: int = 256
    learning_rate_init: float = 1e-3
    max_iter: int = 200
    freeze_precision: float = 0.9
    alert_recall: float = 0.9
    gbt: GbtParams = GbtParams()

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {list(ALGORITHMS)}, "
                             f"got {self.algorithm!r}")
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden layer sizes must be positive, got {self.hidden}")
        if not 0.0 < self.freeze_precision <= 1.0 or not 0.0 < self.alert_recall <= 1.0:
            raise ValueError("precision and recall targets must be in (0, 1]")
        if self.max_iter < 1 or self.batch_size < 1:
            raise ValueError("max_iter and batch_size must be positive")

    def card_config(self) -> dict[str, Any]:
        """The configuration the card records: shared fields and the algorithm's own."""
        shared = {"algorithm": self.algorithm, "seed": self.seed,
                  "eval_fraction": self.eval_fraction,
                  "freeze_precision": self.freeze_precision, "alert_recall": self.alert_recall}
        if self.algorithm == "lgbm":
            return {**shared, **self.gbt.as_dict()}
        own = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()
               if k not in shared and k != "gbt"}
        return {**shared, **own}


@dataclass(frozen=True, slots=True)
class TrainedModel:
    """The exported model, its card and the fitted library model it was exported from (the
    sklearn pipeline, or the LGBMClassifier)."""

    version: str
    onnx_bytes: bytes
    card: dict[str, Any]
    classifier: Any = field(repr=False)


def log1p_nonneg(x: np.ndarray) -> np.ndarray:
    """The scaling's first step, log(1 + max(x, 0)): Relu → Add 1 → Log in the graph."""
    return np.log1p(np.maximum(x, 0.0))


def model_version(onnx_bytes: bytes, algorithm: Algorithm = "mlp") -> str:
    """The algorithm ("mlp-", "lgbm-") + the first 12 hex digits of the model file's sha256."""
    return f"{algorithm}-{sha256(onnx_bytes).hexdigest()[:12]}"


def fit_classifier(matrix: np.ndarray, labels: np.ndarray, config: TrainConfig) -> Any:
    """Fit the sklearn pipeline (deterministic for a seed) on float32 model inputs."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler
    from threadpoolctl import threadpool_limits

    pipeline = make_pipeline(
        FunctionTransformer(log1p_nonneg),
        StandardScaler(),
        MLPClassifier(hidden_layer_sizes=config.hidden, activation="relu", solver="adam",
                      alpha=config.alpha, batch_size=config.batch_size,
                      learning_rate_init=config.learning_rate_init, max_iter=config.max_iter,
                      shuffle=True, random_state=config.seed, early_stopping=False),
    )
    with threadpool_limits(limits=1), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        pipeline.fit(matrix.astype(np.float64), labels)
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            log.warning("training: %s", w.message)
    return pipeline


def export_classifier(pipeline: Any) -> bytes:
    """The fitted pipeline as ONNX bytes (graph.mlp_model)."""
    scaler, mlp = pipeline[1], pipeline[2]
    if mlp.out_activation_ != "logistic" or mlp.activation != "relu":
        raise ValueError("only a binary ReLU MLP with a logistic output can be exported")
    return mlp_model(mean=scaler.mean_, std=scaler.scale_, weights=mlp.coefs_,
                     biases=mlp.intercepts_)


@dataclass(frozen=True, slots=True)
class _Fitted:
    """One algorithm's exported model and its parts of the card."""

    onnx_bytes: bytes
    model_card: dict[str, Any]
    training_card: dict[str, Any]
    export_metrics: dict[str, float]
    libraries: Mapping[str, str]
    classifier: Any


def _fit_mlp(x_train: np.ndarray, y_train: np.ndarray, x_eval: np.ndarray,
             config: TrainConfig) -> _Fitted:
    pipeline = fit_classifier(x_train, y_train, config)
    onnx_bytes = export_classifier(pipeline)
    scorer = OnnxScorer(onnx_bytes, device="cpu", name="mlp-export-check")
    sklearn_eval = pipeline.predict_proba(x_eval.astype(np.float64))[:, 1]
    diff = float(np.max(np.abs(scorer.score(x_eval).astype(np.float64) - sklearn_eval)))
    if diff > EXPORT_TOLERANCE:
        raise RuntimeError(f"exported graph differs from sklearn by {diff:.3g} "
                           f"(> {EXPORT_TOLERANCE}): export bug")
    mlp = pipeline[2]
    model_card = {
        "kind": "mlp", "algorithm": "mlp", "hidden_layers": list(config.hidden),
        "activation": "relu", "output": "sigmoid", "opset": OPSET, "ir_version": IR_VERSION,
        "preprocessing": {
            "id": PREPROCESSING,
            "graph": "Relu -> Add 1 -> Log -> Sub mean -> Div std",
            "formula": "z = (log(1 + max(x, 0)) - mean) / std; the -1 sentinel becomes 0 "
                       "before standardisation; std = 1 for constant columns",
        },
    }
    training_card = {
        "seed": config.seed, "estimator": "sklearn.neural_network.MLPClassifier",
        "config": config.card_config(),
        "iterations": int(mlp.n_iter_), "final_loss": float(mlp.loss_),
    }
    return _Fitted(onnx_bytes, model_card, training_card,
                   {"export_max_abs_diff_vs_sklearn": diff}, {}, pipeline)


def occlusion_reference(matrix: np.ndarray) -> np.ndarray:
    """The training rows' typical value per feature, as the MLP's graph defines it: expm1 of
    the mean of log1p(max(x, 0)), float32 (app.scoring.explain)."""
    logged = np.log1p(np.maximum(matrix.astype(np.float64), 0.0))
    return np.expm1(logged.mean(axis=0)).astype(np.float32)


def _fit_lgbm(x_train: np.ndarray, y_train: np.ndarray, x_eval: np.ndarray,
              config: TrainConfig) -> _Fitted:
    fitted = train_gbt(x_train, y_train, config.gbt, seed=config.seed, check_rows=x_eval)
    training_card = {**fitted.training_card, "config": config.card_config()}
    # trees have no standardising layer to read a typical row from: the card carries it, by the
    # MLP's definition (app.scoring.explain), for the occlusion explanations
    model_card = {**fitted.model_card,
                  "occlusion_reference": occlusion_reference(x_train).tolist()}
    return _Fitted(fitted.onnx_bytes, model_card, training_card,
                   {"export_max_abs_diff_vs_lightgbm": fitted.export_max_abs_diff},
                   gbt_library_versions(), fitted.classifier)


def train_model(
    table: pa.Table, config: TrainConfig, *, created_from: Mapping[str, Any] | None = None
) -> TrainedModel:
    """Fit on the earlier days of a point-in-time training table, evaluate on the later days."""
    rows = labelled_rows(table)
    split = time_split(rows.ts_ms, config.eval_fraction)
    train = split.train_mask(rows.ts_ms)
    x_train, y_train = rows.matrix[train], rows.labels[train]
    x_eval, y_eval = rows.matrix[~train], rows.labels[~train]
    for name, y in (("train", y_train), ("eval", y_eval)):
        if y.min() == y.max():
            raise ValueError(f"the {name} days hold only label {int(y[0])}: "
                             "use a longer log or another split")
    log.info("training %s on %d rows (%d fraud) before %d, evaluating on %d rows (%d fraud)",
             config.algorithm, len(y_train), int(y_train.sum()), split.boundary_ts_ms,
             len(y_eval), int(y_eval.sum()))
    fit = _fit_lgbm if config.algorithm == "lgbm" else _fit_mlp
    fitted = fit(x_train, y_train, x_eval, config)
    onnx_bytes = fitted.onnx_bytes
    version = model_version(onnx_bytes, config.algorithm)
    scorer = OnnxScorer(onnx_bytes, device="cpu", name=version)
    eval_scores = scorer.score(x_eval)
    train_scores = scorer.score(x_train)
    chosen = evaluation.choose_thresholds(eval_scores, y_eval,
                                          freeze_precision=config.freeze_precision,
                                          alert_recall=config.alert_recall)
    if not chosen.freeze_target_met:
        log.warning("no threshold reaches precision %.2f on the evaluation days; freeze at the "
                    "best precision instead", config.freeze_precision)
    card: dict[str, Any] = {
        "schema": CARD_SCHEMA,
        "version": version,
        "model": {
            "file": MODEL_FILE, "sha256": sha256(onnx_bytes).hexdigest(), "bytes": len(onnx_bytes),
            **fitted.model_card,
        },
        "features": DECLARED.as_list(),
        "input": {"name": INPUT_NAME, "dtype": INPUT_DTYPE, "shape": ["N", DECLARED.width]},
        "output": {"name": OUTPUT_NAME, "dtype": "float32", "shape": ["N", 1]},
        "thresholds": {"freeze": chosen.freeze, "alert": chosen.alert},
        "threshold_rule": {
            "freeze": f"lowest eval-day score with precision >= {config.freeze_precision}",
            "alert": f"highest eval-day score with recall >= {config.alert_recall}, "
                     "at most freeze",
            "decision": "score >= freeze: freeze_card + alert_customer; "
                        "score >= alert: alert_customer",
            "freeze_precision_target": config.freeze_precision,
            "alert_recall_target": config.alert_recall,
            "freeze_target_met": chosen.freeze_target_met,
        },
        "metrics": {
            "eval": {
                "roc_auc": evaluation.roc_auc(eval_scores, y_eval),
                "pr_auc": evaluation.pr_auc(eval_scores, y_eval),
                "freeze": evaluation.at_threshold(eval_scores, y_eval, chosen.freeze),
                "alert": evaluation.at_threshold(eval_scores, y_eval, chosen.alert),
            },
            "train": {
                "roc_auc": evaluation.roc_auc(train_scores, y_train),
                "pr_auc": evaluation.pr_auc(train_scores, y_train),
            },
            **fitted.export_metrics,
        },
        "data": {
            "train_rows": int(len(y_train)), "train_positives": int(y_train.sum()),
            "eval_rows": int(len(y_eval)), "eval_positives": int(y_eval.sum()),
            "split": split.describe(),
            "fingerprint": rows.fingerprint, "fingerprint_rule": FINGERPRINT_RULE,
        },
        "training": fitted.training_card,
        "created_from": dict(created_from or {}),
        "libraries": {**library_versions(), **fitted.libraries},
        DRIFT_KEY: build_reference(x_train, train_scores, source=REFERENCE_SOURCE).to_json(),
    }
    return TrainedModel(version, onnx_bytes, card, fitted.classifier)


def library_versions() -> dict[str, str]:
    """Versions of the libraries that fitted, exported and evaluated the model."""
    import onnx
    import onnxruntime
    import sklearn

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
            "scikit-learn": sklearn.__version__, "numpy": np.__version__,
            "pyarrow": pa.__version__}
