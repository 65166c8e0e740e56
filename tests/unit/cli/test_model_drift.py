"""The drift commands' mistakes: one line that says what to do, and nothing published (no
network here: a refused activation never reaches Kafka, which these tests point nowhere)."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.settings import SHIPPED_MODEL_DIR

#: A broker address nothing listens on: reaching Kafka would fail differently.
NOWHERE = {"KAFKA_BOOTSTRAP": "127.0.0.1:1"}


def _one_line_error(args: list[str]) -> str:
    result = CliRunner(env=NOWHERE).invoke(cli, args)
    assert result.exit_code != 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture
def unreferenced(tmp_path: Path) -> tuple[Path, str]:
    """A copy of the shipped models whose default card has no drift reference."""
    target = tmp_path / "models"
    shutil.copytree(SHIPPED_MODEL_DIR, target)
    version = (target / "DEFAULT").read_text().strip()
    card_path = target / version / "card.json"
    card = orjson.loads(card_path.read_bytes())
    del card["drift_reference"]
    card_path.write_bytes(orjson.dumps(card, option=orjson.OPT_INDENT_2) + b"\n")
    return target, version


def test_activating_a_model_without_reference_says_how_to_compute_it(
        unreferenced: tuple[Path, str]) -> None:
    models, version = unreferenced
    line = _one_line_error(["model", "activate", "--model", version, "--model-dir", str(models)])
    assert f"fraudstream model reference --model {version} --events" in line
    assert "not activated" in line


def test_drift_of_a_model_without_reference_says_how_to_compute_it(
        unreferenced: tuple[Path, str], tmp_path: Path) -> None:
    models, version = unreferenced
    log = tmp_path / "x.jsonl"
    log.write_text("")
    line = _one_line_error(["model", "drift", "--model-dir", str(models), "--events", str(log)])
    assert f"fraudstream model reference --model {version}" in line


def test_an_unknown_version_names_the_known_ones(tmp_path: Path) -> None:
    log = tmp_path / "x.jsonl"
    log.write_text("")
    line = _one_line_error(["model", "drift", "--model", "no-such-model", "--events", str(log)])
    assert "not found" in line and "known:" in line
    line = _one_line_error(["model", "activate", "--model", "no-such-model"])
    assert "not found" in line
    line = _one_line_error(["model", "shadow", "--model", "no-such-model"])
    assert "not shadowed" in line and "known:" in line
    line = _one_line_error(["model", "shadow"])
    assert "--stop" in line


def test_a_malformed_drift_spec_shows_the_expected_form(tmp_path: Path) -> None:
    line = _one_line_error(["generate", "--out", str(tmp_path / "x.jsonl"), "--txns", "10",
                            "--cards", "2", "--drift", "amount=3"])
    assert "bad --drift SPEC 'amount=3'" in line and "from=TIME, amount=xF" in line
    assert not (tmp_path / "x.jsonl").exists()


def test_shipped_model_carries_its_reference() -> None:
    from app.scoring.drift_reference import DriftReference
    from app.scoring.registry import ModelRegistry

    registry = ModelRegistry(SHIPPED_MODEL_DIR, device="cpu")
    version = registry.default_version()
    ref = DriftReference.of_card(registry.card(version).raw, version)
    assert ref.rows == registry.card(version).raw["data"]["train_rows"]
