"""The feature declaration: every feature as data, the only place a feature exists."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

Aggregate = Literal["count", "sum", "max", "mean", "distinct", "since_prev", "ratio_to_mean",
                    "outliers", "labelled", "frauds", "fraud_share", "fraud_streak",
                    "hours_since_genuine", "streak_age", "unexplained"]
SourceField = Literal["amount_minor", "merchant_id", "country", "ts_ms", "label"]
#: Whose history a feature aggregates: the card's own events, or the merchant's.
Entity = Literal["card", "merchant"]
#: Which topic a feature is folded from: the card's transactions, or the labels.
Feed = Literal["transactions", "labels"]
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
    "outliers": "int64",
    "labelled": "int64",
    "frauds": "int64",
    "fraud_share": "float64",
    "fraud_streak": "int64",
    "hours_since_genuine": "int64",
    "streak_age": "int64",
    "unexplained": "int64",
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
    "outliers": frozenset({"amount_minor"}),
    "labelled": frozenset({"label"}),
    "frauds": frozenset({"label"}),
    "fraud_share": frozenset({"label"}),
    "fraud_streak": frozenset({"label"}),
    "hours_since_genuine": frozenset({"label"}),
    "streak_age": frozenset({"label"}),
    "unexplained": frozenset({"label"}),
}
#: The aggregates of each feed (and so of each entity: merchants are seen through labels only).
_FEED_AGGREGATES: Final[Mapping[str, frozenset[str]]] = {
    "transactions": frozenset({"count", "sum", "max", "mean", "distinct", "since_prev",
                               "ratio_to_mean", "outliers"}),
    "labels": frozenset({"labelled", "frauds", "fraud_share", "fraud_streak",
                         "hours_since_genuine", "streak_age", "unexplained"}),
}
#: Label-fed windows and delays are whole hours (a label is known from the hour after it is
#: reported).
HOUR_MS: Final = 3_600_000


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
    """One model input: an aggregate of a source field over a window of an entity's history.

    Card features (`entity="card"`, `feed="transactions"`) aggregate the card's own events over
    (τ − W, τ]. Merchant features (`entity="merchant"`, `feed="labels"`) aggregate the labels of
    the merchant's transactions over whole days that end `delay` before τ's day: see
    app/features/merchant.py for the exact rule. An `outliers` feature counts the card's other
    events of its window whose amount is over `factor` (num, den) times the scored event's
    mean over the `reference` window: amount · count_ref · den > num · sum_ref, in integers.
    An `unexplained` merchant feature counts the fraud labels no fraud label of the same card
    over the `reference` window before explains (app/features/merchant.py).
    """

    name: str
    aggregate: Aggregate
    source: SourceField
    window: Window
    dtype: Dtype
    description: str
    entity: Entity = "card"
    feed: Feed = "transactions"
    delay: Window | None = None
    #: `outliers`: the amount factor as a fraction (num, den) and the mean's window;
    #: `unexplained`: the card's window before a fraud whose frauds explain it.
    factor: tuple[int, int] | None = None
    reference: Window | None = None

    def __post_init__(self) -> None:
        if self.aggregate not in _FEED_AGGREGATES[self.feed]:
            raise ValueError(f"feature {self.name}: {self.aggregate} is not an aggregate of the "
                             f"{self.feed} feed")
        if (self.entity == "merchant") != (self.feed == "labels"):
            raise ValueError(f"feature {self.name}: merchant features come from labels, card "
                             "features from transactions")
        if self.feed == "labels" and (self.delay is None or self.window.ms % HOUR_MS
                                      or self.delay.ms % HOUR_MS):
            raise ValueError(f"feature {self.name}: a label-fed window and its delay are whole "
                             "hours")
        if self.feed == "transactions" and self.delay is not None:
            raise ValueError(f"feature {self.name}: only label-fed features have a delay")
        if (self.aggregate == "outliers") != (self.factor is not None):
            raise ValueError(f"feature {self.name}: an outliers feature, and only one, has a "
                             "factor")
        if (self.aggregate in ("outliers", "unexplained")) != (self.reference is not None):
            raise ValueError(f"feature {self.name}: outliers and unexplained features, and "
                             "only they, have a reference window")
        if self.factor is not None and not (self.factor[0] > 0 and self.factor[1] > 0):
            raise ValueError(f"feature {self.name}: the factor is a positive fraction")
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
W7D: Final = Window(name="7d", ms=7 * 86_400_000)
W14D: Final = Window(name="14d", ms=14 * 86_400_000)
W30D: Final = Window(name="30d", ms=30 * 86_400_000)
WINDOWS: Final[tuple[Window, ...]] = (W1M, W5M, W1H, W24H)
#: Card windows of long history: only count and mean are declared over them.
LONG_WINDOWS: Final[tuple[Window, ...]] = (W7D, W30D)
W1D: Final = Window(name="1d", ms=24 * HOUR_MS)
#: How long after a transaction its label is taken to be known (the Fraud Detection Handbook's
#: delay): merchant windows end this long before the scored transaction's day.
LABEL_DELAY: Final = W7D
MERCHANT_WINDOWS: Final[tuple[Window, ...]] = (W1D, W7D, W30D)
#: A merchant's fraud label is explained by the card when the card has another fraud label over
#: this window before the labelled transaction (a compromised card's, not the merchant's).
EXPLAINED_BY: Final = W14D


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


def _long_features(w: Window) -> tuple[Feature, ...]:
    return tuple(f for f in _amount_features(w) if f.aggregate in ("count", "mean"))


def _outliers(w: Window, num: int, den: int) -> Feature:
    times = f"{num}" if den == 1 else f"{num / den:g}"
    return Feature(name=f"outliers_{w.name}", aggregate="outliers", source="amount_minor",
                   window=w, dtype="int64", factor=(num, den), reference=W30D,
                   description=f"Other transactions of the card in the last {w.name} whose "
                   f"amount_minor is over {times} x this transaction's mean_30d: a compromised "
                   "card's inflated amounts stand out against its month.")


def _merchant(name: str, aggregate: Aggregate, w: Window, dtype: Dtype,
              description: str, reference: Window | None = None) -> Feature:
    return Feature(name=name, aggregate=aggregate, source="label", window=w, dtype=dtype,
                   entity="merchant", feed="labels", delay=LABEL_DELAY, description=description,
                   reference=reference)


def _merchant_features(w: Window) -> tuple[Feature, ...]:
    hours = f"the {w.name} ending {LABEL_DELAY.name} before the transaction's hour"
    return (
        _merchant(f"merchant_labelled_{w.name}", "labelled", w, "int64",
                  "Labels known (reported before the transaction's hour) for the merchant's "
                  f"transactions of {hours}."),
        _merchant(f"merchant_frauds_{w.name}", "frauds", w, "int64",
                  f"Those of merchant_labelled_{w.name} that say fraud."),
        _merchant(f"merchant_fraud_share_{w.name}", "fraud_share", w, "float64",
                  f"merchant_frauds_{w.name} / merchant_labelled_{w.name} (0.0 when none): "
                  "the merchant's known fraud share."),
        _merchant(f"merchant_unexplained_{w.name}", "unexplained", w, "int64",
                  f"Those of merchant_frauds_{w.name} whose card has no other known fraud label "
                  f"in the {EXPLAINED_BY.name} before the labelled transaction: frauds the card "
                  "does not explain, as a compromised merchant's are.", EXPLAINED_BY),
    )


def _merchant_recency(w: Window) -> tuple[Feature, ...]:
    return (
        _merchant(f"merchant_fraud_streak_{w.name}", "fraud_streak", w, "int64",
                  f"Fraud labels in a row at the end of the merchant's known labels of the "
                  f"{w.name} window (ordered by transaction time, then label_id): a "
                  "compromised merchant's latest known transactions are all fraud."),
        _merchant(f"merchant_hours_since_genuine_{w.name}", "hours_since_genuine", w, "int64",
                  f"Hours from the latest known genuine label's transaction hour to the "
                  f"window's end ({w.name} window; its length + 1 when none)."),
        _merchant(f"merchant_streak_age_{w.name}", "streak_age", w, "int64",
                  f"Hours from the transaction hour of the first fraud label of that run to "
                  f"the window's end ({w.name} window; 0 when the run is empty): with the "
                  "hours since genuine it brackets when a compromise began."),
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
    *(f for w in LONG_WINDOWS for f in _long_features(w)),
    Feature(name="amount_to_mean_30d", aggregate="ratio_to_mean", source="amount_minor",
            window=W30D, dtype="float64", description="amount_minor / mean_30d."),
    _outliers(W30D, 3, 1),
    _outliers(W7D, 5, 2),
    *(f for w in MERCHANT_WINDOWS for f in _merchant_features(w)),
    *_merchant_recency(W30D),
)

#: The model's input order: the card features, then the merchant features.
FEATURE_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in FEATURES)
FEATURE_DTYPES: Final[Mapping[str, Dtype]] = {f.name: f.dtype for f in FEATURES}
#: The features folded from the card's transactions (the card state's vector, in this order).
CARD_FEATURES: Final[tuple[Feature, ...]] = tuple(f for f in FEATURES if f.entity == "card")
#: The label-fed merchant features (app.features.merchant), in input order after the card's.
MERCHANT_FEATURES: Final[tuple[Feature, ...]] = tuple(
    f for f in FEATURES if f.entity == "merchant")
CARD_FEATURE_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in CARD_FEATURES)
MERCHANT_FEATURE_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in MERCHANT_FEATURES)
#: The features that are amounts of money, in the minor units of the transactions' currency
#: (sums, maxima and means of amount_minor; counts and ratios are not).
MONEY_FEATURE_NAMES: Final[frozenset[str]] = frozenset(
    f.name for f in FEATURES
    if f.source == "amount_minor" and f.aggregate in ("sum", "max", "mean"))
#: The card state's horizon: its longest window.
MAX_WINDOW_MS: Final[int] = max(f.window.ms for f in CARD_FEATURES)

if FEATURES != CARD_FEATURES + MERCHANT_FEATURES:  # pragma: no cover - a declaration bug
    raise ValueError("card features come first in the declaration, merchant features after")

if len(set(FEATURE_NAMES)) != len(FEATURE_NAMES):  # pragma: no cover - a declaration bug
    raise ValueError("feature names must be unique")


def feature_dict(values: Iterable[FeatureValue]) -> dict[str, FeatureValue]:
    """A feature vector (in FEATURE_NAMES order) as {name: value}."""
    return dict(zip(FEATURE_NAMES, values, strict=True))


def render_markdown(features: Iterable[Feature] = FEATURES) -> str:
    """The features as a Markdown table, in model input order (for the docs)."""
    lines = [
        "| # | feature | entity | feed | dtype | aggregate | source | window | description |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, f in enumerate(features):
        window = f.window.name if f.delay is None else f"{f.window.name}, {f.delay.name} delay"
        lines.append(f"| {i} | `{f.name}` | {f.entity} | {f.feed} | {f.dtype} | {f.aggregate} | "
                     f"{f.source} | {window} | {f.description.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
