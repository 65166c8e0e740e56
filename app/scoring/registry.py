"""The model registry: models/<version>/{model.onnx, card.json} and models/DEFAULT.

Loading a version checks, before anything is scored: the version name is safe, the card
parses and its features/input equal the declaration, the ONNX file's sha256 is the card's,
and the graph's input/output match the contract (ModelContractError otherwise). Loaded models
are cached per version: one scorer per model per process (one CPU session; with CUDA a
hybrid of a CPU and a CUDA session, see hybrid.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from app.scoring.card import CARD_FILE, MODEL_FILE, ModelCard, card_json
from app.scoring.contract import DECLARED, FeatureSpec, ModelError
from app.scoring.hybrid import GpuOptions, build_scorer
from app.scoring.metrics import ScorerMetrics, default_metrics
from app.scoring.policy import Thresholds
from app.scoring.scorer import Device, Scorer

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_FILE: Final = "DEFAULT"
VERSION_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class ModelRegistryError(ModelError, LookupError):
    """A model version that does not exist, is named badly, or whose files are inconsistent."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A validated model ready to score: its card and its scorer."""

    version: str
    card: ModelCard
    scorer: Scorer
    path: Path

    @property
    def thresholds(self) -> Thresholds:
        """The card's decision thresholds (callers may `override` them)."""
        return self.card.thresholds


def check_version_name(version: str) -> str:
    """`version` if it is a safe directory name, else ModelRegistryError."""
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        raise ModelRegistryError(f"bad model version name {version!r}: expected "
                                 "[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
    return version


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class ModelRegistry:
    """Model versions under one directory; `load` validates and caches."""

    def __init__(self, model_dir: Path | str, *, device: Device = "auto",
                 spec: FeatureSpec = DECLARED, gpu: GpuOptions | None = None,
                 metrics: ScorerMetrics | None = None) -> None:
        self.root = Path(model_dir)
        self.device: Device = device
        self.spec = spec
        self.gpu = gpu or GpuOptions()
        self.metrics = metrics
        self._loaded: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, *, metrics: bool = True) -> ModelRegistry:
        """The worker's registry: model dir, device and GPU options from settings; scorers
        count their calls per provider in the Prometheus metrics unless `metrics` is False."""
        return cls(settings.model_dir, device=settings.scorer_device,
                   gpu=GpuOptions.from_settings(settings),
                   metrics=default_metrics() if metrics else None)

    def versions(self) -> list[str]:
        """Every version directory holding a card, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and VERSION_RE.fullmatch(p.name) and (p / CARD_FILE).is_file())

    def default_version(self) -> str:
        """The version named by <model_dir>/DEFAULT."""
        path = self.root / DEFAULT_FILE
        try:
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            raise ModelRegistryError(f"{path.resolve()} does not exist: no default model "
                                     "(train one, name a version, or point "
                                     "FRAUDSTREAM_MODEL_DIR at a model directory)") from None
        return check_version_name(text)

    def path(self, version: str) -> Path:
        """The directory of `version` (which must exist)."""
        directory = self.root / check_version_name(version)
        if not (directory / CARD_FILE).is_file() or not (directory / MODEL_FILE).is_file():
            known = ", ".join(self.versions()) or "none"
            raise ModelRegistryError(f"model {version} not found in {self.root.resolve()} "
                                     f"(known: {known}; FRAUDSTREAM_MODEL_DIR or --model-dir "
                                     f"looks elsewhere)")
        return directory

    def card(self, version: str) -> ModelCard:
        """The version's card, validated against the declaration and its directory name."""
        directory = self.path(version)
        card = ModelCard.from_json((directory / CARD_FILE).read_bytes(), spec=self.spec,
                                   where=str(directory / CARD_FILE))
        if card.version != version:
            raise ModelRegistryError(f"{directory / CARD_FILE}: card says version "
                                     f"{card.version!r}, directory is {version!r}")
        return card

    def load(self, version: str | None = None) -> LoadedModel:
        """The validated model (default: DEFAULT's), built once per version."""
        name = self.default_version() if version is None else check_version_name(version)
        with self._lock:
            cached = self._loaded.get(name)
            if cached is not None:
                return cached
            card = self.card(name)
            directory = self.path(name)
            data = (directory / MODEL_FILE).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest != card.model_sha256:
                raise ModelRegistryError(
                    f"{directory / MODEL_FILE}: sha256 {digest[:12]}… is not the card's "
                    f"{card.model_sha256[:12]}… (file replaced?)")
            scorer = build_scorer(data, device=self.device, gpu=self.gpu, spec=self.spec,
                                  name=name, metrics=self.metrics)
            loaded = LoadedModel(name, card, scorer, directory)
            self._loaded[name] = loaded
            log.info("model %s ready: thresholds freeze=%s alert=%s, provider %s", name,
                     card.thresholds.freeze, card.thresholds.alert, scorer.active_provider)
            return loaded

    def add(self, version: str, onnx_bytes: bytes, card: Mapping[str, Any], *,
            make_default: bool = False) -> Path:
        """Write a model version (files replaced atomically); optionally make it the default."""
        ModelCard.parse(dict(card), spec=self.spec, where=f"card of {version}")
        if card["version"] != version:
            raise ModelRegistryError(f"card version {card['version']!r} is not {version!r}")
        directory = self.root / check_version_name(version)
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomic(directory / MODEL_FILE, onnx_bytes)
        _write_atomic(directory / CARD_FILE, card_json(card))
        if make_default:
            self.set_default(version)
        return directory

    def set_default(self, version: str) -> None:
        """Point DEFAULT at `version` (which must load cleanly)."""
        self.card(version)
        self.root.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.root / DEFAULT_FILE, f"{version}\n".encode())
