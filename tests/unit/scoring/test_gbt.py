"""Gradient-boosted trees: the export is LightGBM's model, deterministic, served by the scorer."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pytest
from click.testing import CliRunner
from scoring_support import SmallLog

from app.cli.model import train
from app.features.declaration import FEATURE_NAMES
from app.scoring.contract import DECLARED, INPUT_NAME, META_FEATURES, OUTPUT_NAME
from app.scoring.dataset import labelled_rows
from app.scoring.gbt import (
    EXPORT_TOLERANCE,
    GbtParams,
    export_lgbm,
    fit_lgbm,
    float32_floor,
    predict_proba,
    train_gbt,
)
from app.scoring.graph import graph_ops, model_metadata
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import OnnxScorer
from app.scoring.trainer import TrainConfig, TrainedModel, model_version, train_model

pytest.importorskip("lightgbm")
pytest.importorskip("onnxmltools")

#: Small enough to fit in about a second on two busy cores.
PARAMS = GbtParams(n_estimators=60, num_leaves=15)
CONFIG = TrainConfig(algorithm="lgbm", seed=0, gbt=PARAMS)


@pytest.fixture(scope="module")
def gbt_model(training_table: pa.Table) -> TrainedModel:
    return train_model(training_table, CONFIG)


def _adjacent_floats(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns of consecutive float32 values (every split lies between two neighbours) and
    labels that depend on them: the case where rounding a threshold to nearest goes wrong."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(0, 300, (rows, DECLARED.width))
    base = np.float32(1000.0)
    matrix = (base + steps * float(np.spacing(base))).astype(np.float32)
    labels = ((steps[:, 0] % 7 < 3) ^ (steps[:, -1] % 5 == 0)).astype(np.int64)
    return matrix, labels


def test_export_reproduces_lightgbm_on_served_rows(gbt_model: TrainedModel,
                                                   training_table: pa.Table) -> None:
    real = labelled_rows(training_table).matrix
    scorer = OnnxScorer(gbt_model.onnx_bytes, device="cpu")
    diff = np.max(np.abs(scorer.score(real) - predict_proba(gbt_model.classifier, real)))
    assert diff <= EXPORT_TOLERANCE
    assert gbt_model.card["metrics"]["export_max_abs_diff_vs_lightgbm"] <= EXPORT_TOLERANCE


def test_thresholds_round_down_so_float32_inputs_take_lightgbms_branch() -> None:
    rng = np.random.default_rng(5)
    for t in np.concatenate([rng.normal(0, 1e3, 2_000), 10 ** rng.uniform(-30, 30, 2_000),
                             [0.0, 1e-35, -1e-35, 1e300, -1e300]]):
        floor = float32_floor(float(t))
        assert np.float32(floor) == floor and floor <= t
        near = np.float32(t) if abs(t) < 3e38 else np.float32(np.sign(t) * 3e38)
        for x in (near, np.nextafter(near, np.float32(np.inf)),
                  np.nextafter(near, np.float32(-np.inf))):
            assert (float(x) <= t) == (float(x) <= floor)


def test_adjacent_float32_values_need_the_rounded_thresholds() -> None:
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    matrix, labels = _adjacent_floats(4_000, seed=2)
    params = GbtParams(n_estimators=20, num_leaves=31, min_child_samples=5)
    model = train_gbt(matrix, labels, params)  # raises if the export is off
    assert model.export_max_abs_diff <= EXPORT_TOLERANCE
    naive = convert_lightgbm(model.classifier, zipmap=False, target_opset=15,
                             initial_types=[(INPUT_NAME, FloatTensorType([None,
                                                                          DECLARED.width]))])
    session = ort.InferenceSession(naive.SerializeToString(), providers=["CPUExecutionProvider"])
    naive_scores = session.run(["probabilities"], {INPUT_NAME: matrix})[0][:, 1]
    assert np.max(np.abs(naive_scores - predict_proba(model.classifier, matrix))) > 1e-2


def test_same_rows_and_config_give_the_same_bytes(gbt_model: TrainedModel,
                                                  training_table: pa.Table) -> None:
    again = train_model(training_table, CONFIG)
    assert again.onnx_bytes == gbt_model.onnx_bytes  # bytes, not only scores
    assert again.version == gbt_model.version == model_version(gbt_model.onnx_bytes, "lgbm")
    other_seed = train_model(training_table, dataclasses.replace(
        CONFIG, gbt=dataclasses.replace(PARAMS, subsample=0.8, colsample_bytree=0.8), seed=1))
    assert other_seed.onnx_bytes != gbt_model.onnx_bytes


def test_numpy_entry_point_is_the_training_entry_point(gbt_model: TrainedModel,
                                                       training_table: pa.Table) -> None:
    rows = labelled_rows(training_table)
    boundary = gbt_model.card["data"]["split"]["boundary_ts_ms"]
    train_rows = rows.ts_ms < boundary
    direct = train_gbt(rows.matrix[train_rows], rows.labels[train_rows], PARAMS, seed=0)
    assert direct.onnx_bytes == gbt_model.onnx_bytes
    assert direct.model_card["algorithm"] == "lgbm"
    assert direct.training_card["config"] == PARAMS.as_dict()
    assert export_lgbm(fit_lgbm(rows.matrix[train_rows], rows.labels[train_rows], PARAMS)) \
        == gbt_model.onnx_bytes


def test_graph_meets_the_contract(gbt_model: TrainedModel) -> None:
    assert graph_ops(gbt_model.onnx_bytes) == ["TreeEnsembleClassifier", "Slice"]
    assert model_metadata(gbt_model.onnx_bytes)[META_FEATURES] == ",".join(FEATURE_NAMES)
    session = OnnxScorer(gbt_model.onnx_bytes, device="cpu").session
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.type, inp.shape) == (INPUT_NAME, "tensor(float)",
                                               ["N", len(FEATURE_NAMES)])
    assert (out.name, out.type, out.shape) == (OUTPUT_NAME, "tensor(float)", ["N", 1])


def test_registry_serves_it_at_batch_1_and_64(tmp_path, gbt_model: TrainedModel,
                                              training_table: pa.Table) -> None:
    registry = ModelRegistry(tmp_path, device="cpu")
    registry.add(gbt_model.version, gbt_model.onnx_bytes, gbt_model.card, make_default=True)
    loaded = ModelRegistry(tmp_path, device="cpu").load()
    assert loaded.version == gbt_model.version
    matrix = labelled_rows(training_table).matrix[:640]
    whole = loaded.scorer.score(matrix)
    ones = np.concatenate([loaded.scorer.score(matrix[i:i + 1]) for i in range(64)])
    sixty_fours = np.concatenate([loaded.scorer.score(matrix[i:i + 64])
                                  for i in range(0, 640, 64)])
    assert whole.dtype == np.float32 and whole.shape == (640,)
    assert np.array_equal(ones, whole[:64]) and np.array_equal(sixty_fours, whole)
    assert np.max(np.abs(whole - predict_proba(gbt_model.classifier, matrix))) \
        <= EXPORT_TOLERANCE


def test_card_names_algorithm_parameters_features_and_figures(gbt_model: TrainedModel) -> None:
    card = gbt_model.card
    assert card["version"].startswith("lgbm-") and len(card["version"]) == 17
    assert card["model"]["algorithm"] == card["model"]["kind"] == "lgbm"
    assert card["model"]["hyperparameters"] == PARAMS.as_dict()
    assert card["model"]["trees"] == PARAMS.n_estimators
    assert card["training"]["config"]["algorithm"] == "lgbm"
    assert card["training"]["config"]["n_estimators"] == PARAMS.n_estimators
    assert "hidden" not in card["training"]["config"]
    assert set(card["training"]["feature_importance_gain"]) == set(FEATURE_NAMES)
    assert [f["name"] for f in card["features"]] == list(FEATURE_NAMES)
    ev = card["metrics"]["eval"]
    assert 0.5 < ev["roc_auc"] <= 1.0 and 0.0 < ev["pr_auc"] <= 1.0
    assert 0.0 <= card["thresholds"]["alert"] <= card["thresholds"]["freeze"] <= 1.0
    assert {"lightgbm", "onnxmltools", "onnxruntime"} <= set(card["libraries"])


def test_train_cli_lgbm_matches_in_process_training(tmp_path, small_log: SmallLog,
                                                    gbt_model: TrainedModel) -> None:
    result = CliRunner().invoke(train, [
        "--events", str(small_log.events_path), "--labels", str(small_log.labels_path),
        "--model-dir", str(tmp_path), "--now", str(small_log.now_ms), "--lateness-ms", "300000",
        "--algorithm", "lgbm", "--n-estimators", str(PARAMS.n_estimators),
        "--num-leaves", str(PARAMS.num_leaves)])
    assert result.exit_code == 0, result.output
    assert f"model {gbt_model.version}" in result.output and "lgbm: 60 trees" in result.output
    registry = ModelRegistry(tmp_path, device="cpu")
    assert registry.card(gbt_model.version).raw["model"]["algorithm"] == "lgbm"


def test_train_cli_defaults_are_the_parameter_defaults() -> None:
    options = {p.name: p.default for p in train.params}
    defaults = GbtParams()
    renamed = {"colsample": "colsample_bytree"}
    for name in ("n_estimators", "learning_rate", "num_leaves", "max_depth",
                 "min_child_samples", "subsample", "colsample", "scale_pos_weight"):
        assert options[name] == getattr(defaults, renamed.get(name, name)), name
    # the command's default is the handbook benchmark's winner; the Python API keeps the MLP
    assert options["algorithm"] == "lgbm" and TrainConfig().algorithm == "mlp"


@pytest.mark.parametrize("bad", [
    {"n_estimators": 0}, {"num_leaves": 1}, {"learning_rate": 0.0}, {"subsample": 0.0},
    {"colsample_bytree": 1.5}, {"max_depth": 0}, {"scale_pos_weight": -1.0},
])
def test_bad_parameters_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        GbtParams(**bad)


def test_training_rows_must_be_the_served_float32_matrix() -> None:
    matrix, labels = _adjacent_floats(100, seed=1)
    with pytest.raises(ValueError, match="float32"):
        fit_lgbm(matrix.astype(np.float64), labels, PARAMS)
    with pytest.raises(ValueError, match="both 0 and 1"):
        fit_lgbm(matrix, np.zeros(100, dtype=np.int64), PARAMS)
    with pytest.raises(ValueError, match="algorithm"):
        TrainConfig(algorithm="xgb")  # type: ignore[arg-type]


def test_validate_serves_a_tree_model_and_refuses_its_ops_in_another(
        tmp_path, gbt_model: TrainedModel) -> None:
    """`model validate`: a tree model's CPU-only ops are known (a note); the same ops in a model
    whose card does not say trees are refused, as any op without a CUDA kernel."""
    from click.testing import CliRunner

    from app.cli.model import model as model_group

    registry = ModelRegistry(tmp_path, device="cpu")
    registry.add(gbt_model.version, gbt_model.onnx_bytes, gbt_model.card, make_default=True)
    runner = CliRunner()
    ok = runner.invoke(model_group, ["validate", "--model-dir", str(tmp_path), "--model",
                                     gbt_model.version, "--device", "cpu"])
    assert ok.exit_code == 0 and f"OK {gbt_model.version}" in ok.output, ok.output
    assert "TreeEnsembleClassifier run on the CPU kernels" in ok.output
    card = {**gbt_model.card, "version": "mlp-notrees",
            "model": {**gbt_model.card["model"], "algorithm": "mlp"}}
    registry.add("mlp-notrees", gbt_model.onnx_bytes, card)
    bad = runner.invoke(model_group, ["validate", "--model-dir", str(tmp_path), "--model",
                                      "mlp-notrees", "--device", "cpu"])
    assert bad.exit_code == 1 and "INVALID: ops without a CUDA kernel" in bad.output
