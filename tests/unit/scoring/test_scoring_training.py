"""Training: the exported graph is sklearn's model, deterministic, CUDA-only ops, time-split."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from click.testing import CliRunner

from app.cli.model import model as model_group
from app.cli.model import train
from app.features.declaration import FEATURE_NAMES
from app.scoring.dataset import DAY_MS, labelled_rows, time_split
from app.scoring.graph import CUDA_OPS, foreign_ops, graph_ops
from app.scoring.registry import ModelRegistry
from app.scoring.scorer import OnnxScorer, features_matrix
from app.scoring.trainer import TrainedModel, model_version

EXPECTED_OPS = ["Relu", "Add", "Log", "Sub", "Div",
                "Gemm", "Relu", "Gemm", "Relu", "Gemm", "Sigmoid"]


def _extreme_vectors(rng: np.random.Generator, n: int) -> list[tuple[int | float, ...]]:
    """Feature-shaped rows from 0/−1 sentinels to 10^12 amounts."""
    rows = []
    for _ in range(n):
        row: list[int | float] = []
        for name in FEATURE_NAMES:
            if name.startswith(("mean", "amount_to")):
                row.append(float(10 ** rng.uniform(-3, 12)))
            elif name == "ms_since_prev":
                row.append(int(rng.choice([-1, 0, int(rng.integers(0, 86_400_000))])))
            else:
                row.append(int(10 ** rng.uniform(0, 12)))
        rows.append(tuple(row))
    return rows


def test_graph_reproduces_sklearn_predict_proba(model_a: TrainedModel,
                                                training_table: pa.Table) -> None:
    scorer = OnnxScorer(model_a.onnx_bytes, device="cpu")
    real = labelled_rows(training_table).matrix
    extreme = features_matrix(_extreme_vectors(np.random.default_rng(7), 2_000))
    for matrix in (real, extreme):
        expected = model_a.classifier.predict_proba(matrix.astype(np.float64))[:, 1]
        got = scorer.score(matrix).astype(np.float64)
        assert np.max(np.abs(got - expected)) < 1e-5
    assert model_a.card["metrics"]["export_max_abs_diff_vs_sklearn"] < 1e-5


def test_every_op_has_a_cuda_kernel(model_a: TrainedModel, model_b: TrainedModel) -> None:
    assert graph_ops(model_a.onnx_bytes) == EXPECTED_OPS
    assert graph_ops(model_b.onnx_bytes) == ["Relu", "Add", "Log", "Sub", "Div",
                                             "Gemm", "Relu", "Gemm", "Sigmoid"]
    for m in (model_a, model_b):
        assert set(graph_ops(m.onnx_bytes)) <= CUDA_OPS
        assert foreign_ops(m.onnx_bytes) == []
    assert "ZipMap" not in CUDA_OPS and "ArgMax" not in CUDA_OPS


def test_time_split_trains_on_earlier_days_only(model_a: TrainedModel,
                                                training_table: pa.Table) -> None:
    data = model_a.card["data"]
    boundary = data["split"]["boundary_ts_ms"]
    ts = training_table.column("ts_ms").to_numpy()
    labels = training_table.column("label").to_numpy()
    assert boundary % DAY_MS == 0
    assert data["train_rows"] == int((ts < boundary).sum()) > 0
    assert data["eval_rows"] == int((ts >= boundary).sum()) > 0
    assert data["train_positives"] == int(labels[ts < boundary].sum()) > 0
    assert data["eval_positives"] == int(labels[ts >= boundary].sum()) > 0
    assert data["eval_rows"] / len(ts) > 0.2  # roughly the last 30 % of the event-time range


def test_time_split_falls_back_when_midnight_leaves_no_training_day() -> None:
    ts = np.array([DAY_MS + 10, DAY_MS + 20, DAY_MS + 30, DAY_MS + 40])
    split = time_split(ts, 0.3)
    assert not split.day_aligned
    assert split.train_mask(ts).tolist() == [True, True, True, False]


def test_card_records_contract_metrics_and_provenance(model_a: TrainedModel) -> None:
    card = model_a.card
    assert card["version"] == model_a.version == model_version(model_a.onnx_bytes)
    assert card["version"].startswith("mlp-") and len(card["version"]) == 16
    assert [f["name"] for f in card["features"]] == list(FEATURE_NAMES)
    assert card["input"] == {"name": "features", "dtype": "float32",
                             "shape": ["N", len(FEATURE_NAMES)]}
    ev = card["metrics"]["eval"]
    assert 0.5 < ev["roc_auc"] <= 1.0 and 0.0 < ev["pr_auc"] <= 1.0
    th = card["thresholds"]
    assert 0.0 <= th["alert"] <= th["freeze"] <= 1.0
    assert ev["freeze"]["threshold"] == th["freeze"] and ev["alert"]["threshold"] == th["alert"]
    if card["threshold_rule"]["freeze_target_met"]:
        assert ev["freeze"]["precision"] >= 0.9
    assert ev["alert"]["recall"] >= 0.9
    assert card["data"]["fingerprint"].startswith("sha256:")
    assert set(card["libraries"]) == {"onnx", "onnxruntime", "scikit-learn", "numpy", "pyarrow"}
    assert card["model"]["opset"] == 17 and len(model_a.onnx_bytes) < 16_384


def test_train_cli_is_deterministic_and_matches_in_process_training(
    tmp_path, small_log, model_a: TrainedModel
) -> None:
    runner = CliRunner()
    outputs = []
    for run in ("one", "two"):
        out = tmp_path / run
        result = runner.invoke(train, [
            "--events", str(small_log.events_path), "--labels", str(small_log.labels_path),
            "--model-dir", str(out), "--seed", "0", "--max-iter", "30", "--algorithm", "mlp",
            "--now", str(small_log.now_ms), "--lateness-ms", "300000"])
        assert result.exit_code == 0, result.output
        assert f"model {model_a.version}" in result.output and "[default]" in result.output
        outputs.append(out)
    one, two = (ModelRegistry(o, device="cpu") for o in outputs)
    assert one.versions() == two.versions() == [model_a.version]
    assert one.default_version() == model_a.version
    onnx_one = (one.path(model_a.version) / "model.onnx").read_bytes()
    assert onnx_one == (two.path(model_a.version) / "model.onnx").read_bytes()
    assert onnx_one == model_a.onnx_bytes  # the CLI's table is the fixture's table
    card_one = (one.path(model_a.version) / "card.json").read_bytes()
    assert card_one == (two.path(model_a.version) / "card.json").read_bytes()
    assert one.card(model_a.version).raw["created_from"]["events"]["file"] == "events.jsonl"

    listed = runner.invoke(model_group, ["list", "--model-dir", str(outputs[0])])
    assert listed.exit_code == 0 and f"* {model_a.version}" in listed.output
    checked = runner.invoke(model_group, ["validate", "--model-dir", str(outputs[0]),
                                          "--model", model_a.version, "--device", "cpu"])
    assert checked.exit_code == 0, checked.output
    assert checked.output.startswith(f"OK {model_a.version}")
    missing = runner.invoke(model_group, ["--model-dir", str(outputs[0]), "validate", "mlp-nope"])
    assert missing.exit_code == 1 and "not found" in missing.output


def test_different_seed_gives_a_different_version(model_a: TrainedModel,
                                                  model_b: TrainedModel) -> None:
    assert model_a.version != model_b.version
    assert model_a.card["data"]["fingerprint"] == model_b.card["data"]["fingerprint"]
