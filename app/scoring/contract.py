"""The model contract: what a model's input, output and card must say to match the features."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from app.features.declaration import FEATURE_DTYPES, FEATURE_NAMES

#: The model's one input: float32 [N, len(FEATURE_NAMES)] in FEATURE_NAMES order.
INPUT_NAME: Final = "features"
#: The model's one output: float32 [N, 1] or [N], the fraud probability.
OUTPUT_NAME: Final = "score"
INPUT_DTYPE: Final = "float32"
#: Model metadata keys (onnx metadata_props): the feature order the weights were trained on.
META_FEATURES: Final = "fraudstream.feature_names"
META_PREPROCESSING: Final = "fraudstream.preprocessing"
_ORT_FLOAT: Final = "tensor(float)"


class ModelError(Exception):
    """Base of every reason a model cannot be loaded (contract, card, registry)."""


class ModelContractError(ModelError, ValueError):
    """A model or its card does not match the feature declaration; the worker must not start."""


class TensorInfo(Protocol):
    """An input/output description (onnxruntime's NodeArg has these attributes)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> Sequence[Any]: ...

    @property
    def type(self) -> str: ...


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """The model input a declaration implies: names in order and their dtypes."""

    names: tuple[str, ...]
    dtypes: Mapping[str, str]

    @property
    def width(self) -> int:
        """Columns of the model input."""
        return len(self.names)

    def as_list(self) -> list[dict[str, str]]:
        """[{"name", "dtype"}, ...] in input order (the card's `features`)."""
        return [{"name": n, "dtype": self.dtypes[n]} for n in self.names]


DECLARED: Final = FeatureSpec(FEATURE_NAMES, dict(FEATURE_DTYPES))


def _where(model: str) -> str:
    return f"model {model}" if model else "model"


def check_io(
    inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo], *,
    spec: FeatureSpec = DECLARED, model: str = "",
) -> None:
    """Raise ModelContractError unless the graph maps float32 [N, F] `features` to `score`."""
    who = _where(model)
    if len(inputs) != 1:
        names = ", ".join(i.name for i in inputs)
        raise ModelContractError(f"{who}: expected exactly one input {INPUT_NAME!r}, "
                                 f"found {len(inputs)} ({names})")
    inp = inputs[0]
    if inp.name != INPUT_NAME:
        raise ModelContractError(f"{who}: input is named {inp.name!r}, expected {INPUT_NAME!r}")
    if inp.type != _ORT_FLOAT:
        raise ModelContractError(f"{who}: input {INPUT_NAME!r} has type {inp.type}, expected "
                                 f"{_ORT_FLOAT} ({INPUT_DTYPE})")
    shape = list(inp.shape)
    if len(shape) != 2:
        raise ModelContractError(f"{who}: input {INPUT_NAME!r} has rank {len(shape)} "
                                 f"(shape {shape}), expected rank 2 [N, {spec.width}]")
    if shape[1] != spec.width:
        raise ModelContractError(
            f"{who}: input {INPUT_NAME!r} is {shape[1]} wide, but the feature declaration "
            f"(app.features.declaration) has {spec.width} features")
    if isinstance(shape[0], int):
        raise ModelContractError(f"{who}: input batch dimension is fixed at {shape[0]}, "
                                 "expected a free dimension N (micro-batches vary in size)")
    if len(outputs) != 1 or outputs[0].name != OUTPUT_NAME:
        names = ", ".join(o.name for o in outputs)
        raise ModelContractError(f"{who}: expected exactly one output {OUTPUT_NAME!r}, "
                                 f"found ({names})")
    out = outputs[0]
    if out.type != _ORT_FLOAT:
        raise ModelContractError(f"{who}: output {OUTPUT_NAME!r} has type {out.type}, "
                                 f"expected {_ORT_FLOAT}")
    oshape = list(out.shape)
    if not (len(oshape) == 1 or (len(oshape) == 2 and oshape[1] == 1)):
        raise ModelContractError(f"{who}: output {OUTPUT_NAME!r} has shape {oshape}, "
                                 "expected [N] or [N, 1]")


def check_metadata(
    metadata: Mapping[str, str], *, spec: FeatureSpec = DECLARED, model: str = ""
) -> None:
    """Raise ModelContractError if the model's embedded feature order differs from `spec`."""
    recorded = metadata.get(META_FEATURES)
    if recorded is not None and tuple(recorded.split(",")) != spec.names:
        raise ModelContractError(
            f"{_where(model)}: the model was trained on features {recorded.split(',')}, "
            f"the declaration has {list(spec.names)}")


def check_card_features(
    features: Any, *, spec: FeatureSpec = DECLARED, model: str = ""
) -> None:
    """Raise ModelContractError unless the card's features equal the declaration, in order."""
    who = _where(model)
    if not isinstance(features, list) or not all(
        isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("dtype"), str)
        for f in features
    ):
        raise ModelContractError(f"{who}: card 'features' must be a list of "
                                 "{name, dtype} objects")
    names = tuple(f["name"] for f in features)
    if names != spec.names:
        missing = [n for n in spec.names if n not in names]
        extra = [n for n in names if n not in spec.dtypes]
        if missing or extra:
            raise ModelContractError(
                f"{who}: card features differ from the declaration: missing {missing or 'none'}, "
                f"undeclared {extra or 'none'}")
        first = next(i for i, (a, b) in enumerate(zip(names, spec.names, strict=True)) if a != b)
        raise ModelContractError(
            f"{who}: card feature order differs from the declaration at position {first}: "
            f"card has {names[first]!r}, declaration has {spec.names[first]!r}")
    for f in features:
        if f["dtype"] != spec.dtypes[f["name"]]:
            raise ModelContractError(
                f"{who}: card says feature {f['name']!r} is {f['dtype']}, the declaration says "
                f"{spec.dtypes[f['name']]}")


def check_card_input(card_input: Any, *, spec: FeatureSpec = DECLARED, model: str = "") -> None:
    """Raise ModelContractError unless the card's `input` names float32 [N, F] `features`."""
    who = _where(model)
    if not isinstance(card_input, dict):
        raise ModelContractError(f"{who}: card 'input' must be an object")
    if card_input.get("name") != INPUT_NAME:
        raise ModelContractError(f"{who}: card input name is {card_input.get('name')!r}, "
                                 f"expected {INPUT_NAME!r}")
    if card_input.get("dtype") != INPUT_DTYPE:
        raise ModelContractError(f"{who}: card input dtype is {card_input.get('dtype')!r}, "
                                 f"expected {INPUT_DTYPE!r}")
    shape = card_input.get("shape")
    if not isinstance(shape, list) or len(shape) != 2 or shape[1] != spec.width:
        raise ModelContractError(f"{who}: card input shape is {shape!r}, "
                                 f"expected ['N', {spec.width}]")
