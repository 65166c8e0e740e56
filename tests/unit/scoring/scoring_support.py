"""Constants and records shared by the scoring tests (imported by conftest and the tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.datagen.config import GeneratorConfig
from app.features.training_set import Label
from app.scoring.trainer import TrainConfig

LATENESS_MS = 300_000
#: Small but with fraud on both sides of the time split; ~2 s to train on two cores.
LOG_CONFIG = GeneratorConfig(cards=300, txns=20_000, days=6, seed=3, fraud_rate=0.03,
                             out_of_order=0.02, redelivery=0.02, malformed=0.01)
TRAIN_CONFIG = TrainConfig(seed=0, max_iter=30)


@dataclass(frozen=True)
class SmallLog:
    """A generated log with every kind of line, and its labels."""

    lines: list[bytes]
    kinds: list[str]  # valid / redelivery / malformed, per line
    labels: list[Label]
    now_ms: int
    events_path: Path
    labels_path: Path
