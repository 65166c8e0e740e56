"""A model or card that disagrees with the feature declaration is refused, naming what differs."""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from app.features.declaration import FEATURE_DTYPES, FEATURE_NAMES
from app.scoring.card import CARD_FILE, MODEL_FILE, ModelCard, ModelCardError, card_json
from app.scoring.contract import DECLARED, FeatureSpec, ModelContractError
from app.scoring.graph import mlp_model
from app.scoring.registry import ModelRegistry, ModelRegistryError
from app.scoring.scorer import OnnxScorer
from app.scoring.trainer import TrainedModel

F = len(FEATURE_NAMES)


def _mlp(width: int, names: tuple[str, ...] | None = None) -> bytes:
    names = names or tuple(f"f{i}" for i in range(width))
    spec = FeatureSpec(names, dict.fromkeys(names, "int64"))
    rng = np.random.default_rng(0)
    return mlp_model(mean=np.zeros(width), std=np.ones(width),
                     weights=[rng.normal(size=(width, 4)), rng.normal(size=(4, 1))],
                     biases=[np.zeros(4), np.zeros(1)], spec=spec)


def _identity_model(name: str = "features", elem: int = TensorProto.FLOAT,
                    shape: list[object] | None = None) -> bytes:
    shape = ["N", F] if shape is None else shape
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", [name], ["s"], keepdims=1),
         helper.make_node("Sigmoid", ["s"], ["score"])], "g",
        [helper.make_tensor_value_info(name, elem, shape)],
        [helper.make_tensor_value_info("score", elem, [shape[0], 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_wrong_width_is_refused() -> None:
    with pytest.raises(ModelContractError, match=rf"is {F - 1} wide.*has {F} features"):
        OnnxScorer(_mlp(F - 1), device="cpu")


def test_wrong_input_name_is_refused() -> None:
    with pytest.raises(ModelContractError, match="input is named 'x', expected 'features'"):
        OnnxScorer(_identity_model(name="x"), device="cpu")


def test_wrong_dtype_is_refused() -> None:
    with pytest.raises(ModelContractError, match=r"tensor\(double\), expected tensor\(float\)"):
        OnnxScorer(_identity_model(elem=TensorProto.DOUBLE), device="cpu")


def test_wrong_rank_and_fixed_batch_are_refused() -> None:
    with pytest.raises(ModelContractError, match="rank 3"):
        OnnxScorer(_identity_model(shape=["N", F, 1]), device="cpu")
    with pytest.raises(ModelContractError, match="fixed at 64"):
        OnnxScorer(_identity_model(shape=[64, F]), device="cpu")


def test_embedded_feature_order_must_match() -> None:
    swapped = (FEATURE_NAMES[1], FEATURE_NAMES[0], *FEATURE_NAMES[2:])
    with pytest.raises(ModelContractError, match="was trained on features"):
        OnnxScorer(_mlp(F, swapped), device="cpu")
    OnnxScorer(_mlp(F, FEATURE_NAMES), device="cpu")  # the declared order loads


def test_card_feature_order_differs_is_refused(model_a: TrainedModel) -> None:
    card = copy.deepcopy(model_a.card)
    card["features"][2], card["features"][3] = card["features"][3], card["features"][2]
    with pytest.raises(ModelContractError,
                       match=rf"order differs .* position 2: card has '{FEATURE_NAMES[3]}'"):
        ModelCard.parse(card)


def test_card_missing_extra_or_retyped_feature_is_refused(model_a: TrainedModel) -> None:
    card = copy.deepcopy(model_a.card)
    card["features"] = card["features"][:-1] + [{"name": "velocity_2h", "dtype": "int64"}]
    with pytest.raises(ModelContractError, match=rf"missing \['{FEATURE_NAMES[-1]}'\], "
                                                 r"undeclared \['velocity_2h'\]"):
        ModelCard.parse(card)
    card = copy.deepcopy(model_a.card)
    name = FEATURE_NAMES[0]
    card["features"][0]["dtype"] = "float64" if FEATURE_DTYPES[name] == "int64" else "int64"
    with pytest.raises(ModelContractError, match=f"feature '{name}' is"):
        ModelCard.parse(card)
    card = copy.deepcopy(model_a.card)
    card["input"]["shape"] = ["N", F + 1]
    with pytest.raises(ModelContractError, match="card input shape"):
        ModelCard.parse(card)


def test_broken_cards_are_refused(model_a: TrainedModel) -> None:
    with pytest.raises(ModelCardError, match="not valid JSON"):
        ModelCard.from_json(b"{")
    card = copy.deepcopy(model_a.card)
    card["thresholds"] = {"freeze": 0.2, "alert": 0.5}
    with pytest.raises(ModelCardError, match="above freeze"):
        ModelCard.parse(card)


def test_registry_checks_checksum_version_names_and_card(
    tmp_path, model_a: TrainedModel
) -> None:
    reg = ModelRegistry(tmp_path, device="cpu")
    reg.add(model_a.version, model_a.onnx_bytes, model_a.card, make_default=True)
    assert reg.versions() == [model_a.version]
    assert reg.default_version() == model_a.version
    loaded = reg.load()
    assert loaded is reg.load(model_a.version)  # one session per model per process
    assert loaded.card.model_sha256 == hashlib.sha256(model_a.onnx_bytes).hexdigest()

    with pytest.raises(ModelRegistryError, match="bad model version name"):
        reg.load("../etc")
    with pytest.raises(ModelRegistryError, match="not found"):
        reg.load("mlp-000000000000")

    # same card, different weights: the checksum catches the swap
    tampered = onnx.load_from_string(model_a.onnx_bytes)
    tampered.graph.initializer[-1].raw_data = np.float32([9.0]).tobytes()
    (tmp_path / model_a.version / MODEL_FILE).write_bytes(tampered.SerializeToString())
    with pytest.raises(ModelRegistryError, match="is not the card's"):
        ModelRegistry(tmp_path, device="cpu").load(model_a.version)

    # a card edited to another feature order is refused before the model is read
    card = copy.deepcopy(model_a.card)
    card["features"].reverse()
    (tmp_path / model_a.version / CARD_FILE).write_bytes(card_json(card))
    with pytest.raises(ModelContractError, match="order differs"):
        ModelRegistry(tmp_path, device="cpu").load(model_a.version)


def test_declared_spec_matches_declaration() -> None:
    assert DECLARED.names == FEATURE_NAMES
    assert [f["dtype"] for f in DECLARED.as_list()] == [FEATURE_DTYPES[n] for n in FEATURE_NAMES]
