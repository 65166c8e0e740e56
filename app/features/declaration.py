"""The feature declaration: every feature as data, the only place a feature exists."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

Aggregate = Literal["count", "sum", "max", "mean", "distinct", "since_prev", "ratio_to_mean"]
SourceField = Literal["amount_minor", "merchant_id", "country", "ts_ms"]
Dtype = Literal["int64", "float64"]
FeatureValue = int | float

#: The dtype each aggregate produces; integer aggregates are exact, floats are derived from them.
AGGREGATE_DTYPES: Final[Mapping[str, Dtype]] = {
    "count": "int64",
    "sum": "int64",
    "max": "int64",
    "mean": "float64",
    "distinct": "int64",
    "since_prev": "int64",
    "ratio_to_mean": "float64",
}
#: Which source fields each aggregate may read.
_SOURCES: Final[Mapping[str, frozenset[str]]] = {
    "count": frozenset({"amount_minor"}),
    "sum": frozenset({"amount_minor"}),
    "max": frozenset({"amount_minor"}),
    "mean": frozenset({"amount_minor"}),
    "distinct": frozenset({"merchant_id", "country"}),
    "since_prev": frozenset({"ts_ms"}),
    "ratio_to_mean": frozenset({"amount_minor"}),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Window:
    """A sliding event-time window (τ − ms, τ] ending at the scored transaction's ts."""

    name: str
    ms: int

    def __post_init__(self) -> None:
        if self.ms <= 0:
            raise ValueError(f"window {self.name}: length must be positive, got {self.ms}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Feature:
    """One model input: an aggregate of a source field over a window of the card's events."""

    name: str
    aggregate: Aggregate
    source: SourceField
    window: Window
    dtype: Dtype
    description: str

    def __post_init__(self) -> None:
        if AGGREGATE_DTYPES.get(self.aggregate) != self.dtype:
            raise ValueError(f"feature {self.name}: {self.aggregate} yields "
                             f"{AGGREGATE_DTYPES.get(self.aggregate)}, declared {self.dtype}")
        if self.source not in _SOURCES[self.aggregate]:
            raise ValueError(f"feature {self.name}: {self.aggregate} cannot read {self.source}")
        if not self.description:
            raise ValueError(f"feature {self.name}: a description is required")


W1M: Final = Window(name="1m", ms=60_000)
W5M: Final = Window(name="5m", ms=300_000)
W1H: Final = Window(name="1h", ms=3_600_000)
W24H: Final = Window(name="24h", ms=86_400_000)
WINDOWS: Final[tuple[Window, ...]] = (W1M, W5M, W1H, W24H)


def _amount_features(w: Window) -> tuple[Feature, ...]:
    return (
        Feature(name=f"count_{w.name}", aggregate="count", source="amount_minor", window=w,
                dtype="int64", description=f"Transactions of the card in the last {w.name}, "
                "this one included."),
        Feature(name=f"sum_{w.name}", aggregate="sum", source="amount_minor", window=w,
                dtype="int64", description=f"Sum of amount_minor over the last {w.name}."),
        Feature(name=f"max_{w.name}", aggregate="max", source="amount_minor", window=w,
                dtype="int64", description=f"Largest amount_minor in the last {w.name}."),
        Feature(name=f"mean_{w.name}", aggregate="mean", source="amount_minor", window=w,
                dtype="float64", description=f"sum_{w.name} / count_{w.name} "
                "(one correctly rounded division)."),
    )


FEATURES: Final[tuple[Feature, ...]] = (
    *(f for w in WINDOWS for f in _amount_features(w)),
    Feature(name="distinct_merchants_1h", aggregate="distinct", source="merchant_id", window=W1H,
            dtype="int64", description="Distinct merchant_id values in the last 1h."),
    Feature(name="distinct_countries_24h", aggregate="distinct", source="country", window=W24H,
            dtype="int64", description="Distinct country values in the last 24h."),
    Feature(name="ms_since_prev", aggregate="since_prev", source="ts_ms", window=W24H,
            dtype="int64", description="τ minus the latest ts among the other transactions "
            "counted in the 24h window (ties give 0); -1 if there is none."),
    Feature(name="amount_to_mean_24h", aggregate="ratio_to_mean", source="amount_minor",
            window=W24H, dtype="float64", description="amount_minor / mean_24h."),
)

#: The model's input order.
FEATURE_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in FEATURES)
FEATURE_DTYPES: Final[Mapping[str, Dtype]] = {f.name: f.dtype for f in FEATURES}
MAX_WINDOW_MS: Final[int] = max(f.window.ms for f in FEATURES)

if len(set(FEATURE_NAMES)) != len(FEATURE_NAMES):  # pragma: no cover - a declaration bug
    raise ValueError("feature names must be unique")


def feature_dict(values: Iterable[FeatureValue]) -> dict[str, FeatureValue]:
    """A feature vector (in FEATURE_NAMES order) as {name: value}."""
    return dict(zip(FEATURE_NAMES, values, strict=True))


def render_markdown(features: Iterable[Feature] = FEATURES) -> str:
    """The features as a Markdown table, in model input order (for the docs)."""
    lines = [
        "| # | feature | dtype | aggregate | source | window | description |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, f in enumerate(features):
        lines.append(f"| {i} | `{f.name}` | {f.dtype} | {f.aggregate} | {f.source} | "
                     f"{f.window.name} | {f.description.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
