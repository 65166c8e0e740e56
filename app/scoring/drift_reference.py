"""The drift reference of a model: per-feature quantile bins and the score histogram of its
training rows, stored in the model card under `drift_reference`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from app.features.declaration import FEATURE_NAMES
from app.scoring.contract import ModelError

CARD_KEY: Final = "drift_reference"
#: Quantile bins per feature and for the score (deciles): enough resolution for PSI, few
#: enough that an hour of live events fills every bin.
DEFAULT_BINS: Final = 10
SCORE: Final = "score"


class NoReferenceError(ModelError, LookupError):
    """A model whose card has no (usable) drift reference; the message says how to add one."""


def how_to_add(version: str) -> str:
    """The command that computes a missing reference (said the same everywhere)."""
    return (f"compute it with `fraudstream model reference --model {version} --events TRAIN_LOG "
            f"--labels TRAIN_LABELS` (the log and labels it was trained on)")


@dataclass(frozen=True, slots=True)
class Bins:
    """Fixed bins of one series: value v falls in bin `#edges <= v` (len(edges) + 1 bins)."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.edges) + 1:
            raise ValueError(f"{len(self.edges)} edges need {len(self.edges) + 1} counts, "
                             f"got {len(self.counts)}")
        if list(self.edges) != sorted(set(self.edges)):
            raise ValueError("bin edges must be strictly increasing")

    @property
    def size(self) -> int:
        return len(self.counts)

    def index(self, values: np.ndarray) -> np.ndarray:
        """The bin of every value (int64): float32 inputs compare exactly with float64 edges."""
        return np.searchsorted(np.asarray(self.edges, dtype=np.float64),
                               values.astype(np.float64, copy=False), side="right")

    def to_json(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "counts": list(self.counts)}

    @classmethod
    def from_json(cls, obj: Any) -> Bins:
        if not isinstance(obj, dict):
            raise ValueError("bins must be an object {edges, counts}")
        return cls(tuple(float(e) for e in obj["edges"]), tuple(int(c) for c in obj["counts"]))


def quantile_bins(values: np.ndarray, bins: int = DEFAULT_BINS) -> Bins:
    """Edges at the 1/bins .. (bins-1)/bins quantiles (data values, duplicates merged, so a
    discrete feature gets one bin per frequent value), and the counts of `values` in them."""
    if bins < 2:
        raise ValueError(f"at least 2 bins, got {bins}")
    if len(values) == 0:
        raise ValueError("no rows to take quantiles of")
    data = values.astype(np.float64)
    qs = np.quantile(data, np.arange(1, bins) / bins, method="inverted_cdf")
    edges = tuple(float(e) for e in np.unique(qs))
    counts = np.bincount(np.searchsorted(np.asarray(edges), data, side="right"),
                         minlength=len(edges) + 1)
    return Bins(edges, tuple(int(c) for c in counts))


@dataclass(frozen=True, slots=True)
class DriftReference:
    """The training rows' bins: one per model input (FEATURE_NAMES order) and the score's."""

    features: Mapping[str, Bins]
    score: Bins
    rows: int
    source: str

    def __post_init__(self) -> None:
        if tuple(self.features) != FEATURE_NAMES:
            raise ValueError("a reference must bin every declared feature, in input order")

    @property
    def series(self) -> tuple[tuple[str, Bins], ...]:
        """Every binned series: the features in input order, then the score."""
        return (*self.features.items(), (SCORE, self.score))

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "source": self.source,
                "bins_rule": "bin = number of edges <= value (float64 compare); edges are the "
                             "training rows' k/B quantiles (inverted CDF), duplicates merged",
                "features": {n: b.to_json() for n, b in self.features.items()},
                "score": self.score.to_json()}

    @classmethod
    def from_json(cls, obj: Any) -> DriftReference:
        if not isinstance(obj, dict):
            raise ValueError("must be an object")
        feats = obj.get("features")
        if not isinstance(feats, dict) or tuple(feats) != FEATURE_NAMES:
            raise ValueError("'features' must bin every declared feature, in input order")
        return cls({n: Bins.from_json(feats[n]) for n in FEATURE_NAMES},
                   Bins.from_json(obj.get("score")), int(obj.get("rows", 0)),
                   str(obj.get("source", "")))

    @classmethod
    def of_card(cls, card: Mapping[str, Any], version: str) -> DriftReference:
        """The reference in a card's raw JSON; NoReferenceError (saying what to do) without."""
        raw = card.get(CARD_KEY)
        if raw is None:
            raise NoReferenceError(f"model {version} has no drift reference: {how_to_add(version)}")
        try:
            return cls.from_json(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise NoReferenceError(f"model {version}: its drift reference is unusable ({exc}): "
                                   f"{how_to_add(version)}") from None


def build_reference(matrix: np.ndarray, scores: np.ndarray, *, source: str,
                    names: Sequence[str] = FEATURE_NAMES, bins: int = DEFAULT_BINS
                    ) -> DriftReference:
    """The reference of training rows: `matrix` as served (float32 [N, F]) and their scores."""
    if matrix.shape != (len(scores), len(names)):
        raise ValueError(f"matrix {matrix.shape} does not match {len(scores)} scores x "
                         f"{len(names)} features")
    features = {n: quantile_bins(matrix[:, j], bins) for j, n in enumerate(names)}
    return DriftReference(features, quantile_bins(scores, bins), int(len(scores)), source)
