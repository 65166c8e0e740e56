"""The declaration: exact names and order, dtypes, validation, the rendered docs table."""

from __future__ import annotations

import pytest

from app.features.declaration import (
    FEATURE_DTYPES,
    FEATURE_NAMES,
    FEATURES,
    MAX_WINDOW_MS,
    W1H,
    Feature,
    feature_dict,
    render_markdown,
)
from app.features.vector import LAYOUT, build_layout, derive


def test_names_and_order_are_the_contract() -> None:
    expected = [f"{agg}_{w}" for w in ("1m", "5m", "1h", "24h")
                for agg in ("count", "sum", "max", "mean")]
    expected += ["distinct_merchants_1h", "distinct_countries_24h", "ms_since_prev",
                 "amount_to_mean_24h"]
    assert list(FEATURE_NAMES) == expected
    assert MAX_WINDOW_MS == 86_400_000
    floats = {n for n in FEATURE_NAMES if n.startswith("mean_")} | {"amount_to_mean_24h"}
    assert {n for n, d in FEATURE_DTYPES.items() if d == "float64"} == floats


def test_features_are_validated_data() -> None:
    with pytest.raises(ValueError, match="yields int64"):
        Feature(name="x", aggregate="count", source="amount_minor", window=W1H, dtype="float64",
                description="d")
    with pytest.raises(ValueError, match="cannot read"):
        Feature(name="x", aggregate="sum", source="country", window=W1H, dtype="int64",
                description="d")
    with pytest.raises(ValueError, match="description"):
        Feature(name="x", aggregate="sum", source="amount_minor", window=W1H, dtype="int64",
                description="")
    with pytest.raises(TypeError):
        Feature("x", "sum", "amount_minor", W1H, "int64", "positional")  # type: ignore[misc]


def test_markdown_lists_every_feature_in_model_order() -> None:
    lines = render_markdown().splitlines()
    assert len(lines) == 2 + len(FEATURES)
    for i, (line, name) in enumerate(zip(lines[2:], FEATURE_NAMES, strict=True)):
        assert line.startswith(f"| {i} | `{name}` | {FEATURE_DTYPES[name]} |")


def test_layout_and_derivation_follow_the_declaration() -> None:
    assert LAYOUT.width == 15
    assert build_layout(FEATURES).signature == LAYOUT.signature
    assert build_layout(FEATURES[:4]).signature != LAYOUT.signature
    # count, sum, max per window; distinct merchants, countries; since_prev
    prims = [2, 3, 2, 3, 9, 5, 4, 12, 6, 5, 16, 7, 1, 1, 0]
    values = feature_dict(derive(prims, 2))
    assert values["mean_1m"] == 1.5 and values["mean_24h"] == 16 / 5
    assert values["amount_to_mean_24h"] == 2 / (16 / 5)
    assert (values["distinct_merchants_1h"], values["ms_since_prev"]) == (1, 0)
    assert type(values["count_24h"]) is int and type(values["mean_5m"]) is float
