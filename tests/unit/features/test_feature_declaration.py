"""The declaration: exact names and order, dtypes, validation, the rendered docs table."""

from __future__ import annotations

import pytest

from app.features.declaration import (
    CARD_FEATURE_NAMES,
    CARD_FEATURES,
    FEATURE_DTYPES,
    FEATURE_NAMES,
    FEATURES,
    LABEL_DELAY,
    MAX_WINDOW_MS,
    MERCHANT_FEATURE_NAMES,
    W1H,
    W5M,
    W7D,
    Feature,
    render_markdown,
)
from app.features.vector import LAYOUT, build_layout, derive


def test_names_and_order_are_the_contract() -> None:
    expected = [f"{agg}_{w}" for w in ("1m", "5m", "1h", "24h")
                for agg in ("count", "sum", "max", "mean")]
    expected += ["distinct_merchants_1h", "distinct_countries_24h", "ms_since_prev",
                 "amount_to_mean_24h", "count_7d", "mean_7d", "count_30d", "mean_30d",
                 "amount_to_mean_30d", "outliers_30d", "outliers_7d"]
    merchant = [f"merchant_{agg}_{w}" for w in ("1d", "7d", "30d")
                for agg in ("labelled", "frauds", "fraud_share", "unexplained")]
    merchant += ["merchant_fraud_streak_30d", "merchant_hours_since_genuine_30d",
                 "merchant_streak_age_30d"]
    assert list(CARD_FEATURE_NAMES) == expected
    assert list(MERCHANT_FEATURE_NAMES) == merchant
    assert list(FEATURE_NAMES) == expected + merchant
    assert MAX_WINDOW_MS == 30 * 86_400_000
    floats = ({n for n in FEATURE_NAMES if n.startswith(("mean_", "amount_to_mean_"))}
              | {n for n in merchant if "share" in n})
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
    with pytest.raises(ValueError, match="not an aggregate of the labels feed"):
        Feature(name="x", aggregate="count", source="amount_minor", window=W1H, dtype="int64",
                description="d", entity="merchant", feed="labels", delay=LABEL_DELAY)
    with pytest.raises(ValueError, match="merchant features come from labels"):
        Feature(name="x", aggregate="labelled", source="label", window=W7D, dtype="int64",
                description="d", entity="card", feed="labels", delay=LABEL_DELAY)
    with pytest.raises(ValueError, match="whole hours"):
        Feature(name="x", aggregate="labelled", source="label", window=W5M, dtype="int64",
                description="d", entity="merchant", feed="labels", delay=LABEL_DELAY)


def test_markdown_lists_every_feature_in_model_order() -> None:
    lines = render_markdown().splitlines()
    assert len(lines) == 2 + len(FEATURES)
    for i, (line, name) in enumerate(zip(lines[2:], FEATURE_NAMES, strict=True)):
        entity = "merchant" if name in MERCHANT_FEATURE_NAMES else "card"
        assert line.startswith(f"| {i} | `{name}` | {entity} |")
        assert f"| {FEATURE_DTYPES[name]} |" in line


def test_layout_and_derivation_follow_the_declaration() -> None:
    assert LAYOUT.width == 23
    assert build_layout(CARD_FEATURES).signature == LAYOUT.signature
    assert build_layout(FEATURES[:4]).signature != LAYOUT.signature
    # count, sum, max per window (1m, 5m, 1h, 24h, 7d, 30d); distinct merchants,
    # countries; since_prev; outliers 30d, 7d
    prims = [2, 3, 2, 3, 9, 5, 4, 12, 6, 5, 16, 7, 6, 20, 7, 8, 24, 7, 1, 1, 0, 4, 3]
    values = dict(zip(CARD_FEATURE_NAMES, derive(prims, 2), strict=True))
    assert values["mean_7d"] == 20 / 6 and values["amount_to_mean_30d"] == 2 / (24 / 8)
    assert values["mean_1m"] == 1.5 and values["mean_24h"] == 16 / 5
    assert values["amount_to_mean_24h"] == 2 / (16 / 5)
    assert (values["distinct_merchants_1h"], values["ms_since_prev"]) == (1, 0)
    assert (values["outliers_30d"], values["outliers_7d"]) == (4, 3)
    assert type(values["count_24h"]) is int and type(values["mean_5m"]) is float
