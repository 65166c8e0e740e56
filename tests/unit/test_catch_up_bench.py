"""The catch-up bench without a GPU: the worker's scorer is the CPU session, row for row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.features.declaration import FEATURE_NAMES
from app.settings import SHIPPED_MODEL_DIR
from benchmarks.catch_up_bench import main

MODELS = sorted(p.parent.name for p in SHIPPED_MODEL_DIR.glob("*/model.onnx"))


@pytest.mark.parametrize("version", MODELS)
def test_every_row_scored_on_the_cpu_equals_the_oracle(version: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vectors = tmp_path / "vectors.npy"
    np.save(vectors, rng.gamma(2.0, 50.0, (1000, len(FEATURE_NAMES))).astype(np.float32))
    out = tmp_path / "out.json"
    assert main(["--model-dir", str(SHIPPED_MODEL_DIR), "--version", version, "--rows", "5000",
                 "--batches", "64,300", "--vectors", str(vectors), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["worker"] == "CPUExecutionProvider" and report["gpu_min_batch"] is None
    assert [s["batch"] for s in report["sizes"]] == [64, 300]
    for size in report["sizes"]:
        assert size["rows"] >= 5000 and size["cuda_share"] == 0.0 and size["max_abs_diff"] == 0.0


def test_cuda_required_of_the_trees_exits_2_naming_the_node(capsys: pytest.CaptureFixture[str]) -> None:
    trees = next(m for m in MODELS if m.startswith("lgbm-"))
    assert main(["--model-dir", str(SHIPPED_MODEL_DIR), "--version", trees, "--device", "cuda"]) == 2
    assert "TreeEnsembleClassifier" in capsys.readouterr().err
