"""The model card: card.json beside model.onnx, parsed and checked against the contract."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from app.scoring.contract import (
    DECLARED,
    FeatureSpec,
    ModelContractError,
    ModelError,
    check_card_features,
    check_card_input,
)
from app.scoring.policy import Thresholds

CARD_SCHEMA: Final = "fraudstream.model-card.v1"
CARD_FILE: Final = "card.json"
MODEL_FILE: Final = "model.onnx"


class ModelCardError(ModelError, ValueError):
    """A card.json that cannot be read or lacks a required field."""


@dataclass(frozen=True, slots=True)
class ModelCard:
    """The parts of a card the runtime relies on, and the whole card as `raw`."""

    version: str
    model_sha256: str
    thresholds: Thresholds
    raw: Mapping[str, Any] = field(repr=False)

    @classmethod
    def parse(cls, obj: Any, *, spec: FeatureSpec = DECLARED, where: str = "card") -> ModelCard:
        """Validate a decoded card; ModelCardError for a broken card, ModelContractError when
        its features or input disagree with the declaration."""
        if not isinstance(obj, dict):
            raise ModelCardError(f"{where}: must be a JSON object")
        if obj.get("schema") != CARD_SCHEMA:
            raise ModelCardError(f"{where}: schema is {obj.get('schema')!r}, expected "
                                 f"{CARD_SCHEMA!r}")
        version = obj.get("version")
        if not isinstance(version, str) or not version:
            raise ModelCardError(f"{where}: 'version' must be a non-empty string")
        model = obj.get("model")
        if not isinstance(model, dict) or not isinstance(model.get("sha256"), str):
            raise ModelCardError(f"{where}: 'model.sha256' is required")
        if model.get("file") != MODEL_FILE:
            raise ModelCardError(f"{where}: 'model.file' must be {MODEL_FILE!r}")
        raw_thresholds = obj.get("thresholds")
        if not isinstance(raw_thresholds, dict) or set(raw_thresholds) != {"freeze", "alert"}:
            raise ModelCardError(f"{where}: 'thresholds' must be {{freeze, alert}}")
        try:
            thresholds = Thresholds(freeze=raw_thresholds["freeze"], alert=raw_thresholds["alert"])
        except ValueError as exc:
            raise ModelCardError(f"{where}: {exc}") from None
        check_card_features(obj.get("features"), spec=spec, model=version)
        check_card_input(obj.get("input"), spec=spec, model=version)
        return cls(version, model["sha256"], thresholds, obj)

    @classmethod
    def from_json(
        cls, raw: bytes, *, spec: FeatureSpec = DECLARED, where: str = "card"
    ) -> ModelCard:
        """Decode and validate card.json bytes."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ModelCardError(f"{where}: not valid JSON: {exc}") from None
        return cls.parse(obj, spec=spec, where=where)


def card_json(card: Mapping[str, Any]) -> bytes:
    """Canonical card.json bytes (2-space indent, trailing newline): same card, same bytes."""
    return orjson.dumps(card, option=orjson.OPT_INDENT_2) + b"\n"


__all__ = ["CARD_FILE", "CARD_SCHEMA", "MODEL_FILE", "ModelCard", "ModelCardError",
           "ModelContractError", "card_json"]
