"""The shipped model is found from any directory; a missing model names where it looked."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.scoring.registry import ModelRegistry, ModelRegistryError
from app.settings import SHIPPED_MODEL_DIR, Settings


def test_the_default_model_dir_is_the_shipped_one_wherever_the_command_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings().model_dir == SHIPPED_MODEL_DIR and SHIPPED_MODEL_DIR.is_absolute()
    registry = ModelRegistry(Settings().model_dir, device="cpu")
    assert registry.default_version() in registry.versions()


def test_not_found_names_the_absolute_directory_and_the_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    registry = ModelRegistry(Path("empty"), device="cpu")
    with pytest.raises(ModelRegistryError, match=str(tmp_path / "empty") + ".*FRAUDSTREAM_MODEL_DIR"):
        registry.default_version()
    with pytest.raises(ModelRegistryError, match=str(tmp_path / "empty") + ".*FRAUDSTREAM_MODEL_DIR"):
        registry.path("mlp-000000000000")
