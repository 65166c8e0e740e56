"""What applying one transaction to a card's state gives: Accepted, Redelivered or Late."""

from __future__ import annotations

import msgspec

from app.features.declaration import CARD_FEATURE_NAMES, FeatureValue
from app.features.vector import FeatureVector


class Accepted(msgspec.Struct, frozen=True, gc=False):
    """First sight of the transaction: folded into the state and scored with `features`."""

    features: FeatureVector

    def as_dict(self) -> dict[str, FeatureValue]:
        """The card features as {name: value} in model input order."""
        return dict(zip(CARD_FEATURE_NAMES, self.features, strict=True))


class Redelivered(msgspec.Struct, frozen=True, gc=False):
    """A txn_id the card already accepted: not folded again, scored with its first features."""

    features: FeatureVector

    def as_dict(self) -> dict[str, FeatureValue]:
        """The card features as {name: value} in model input order."""
        return dict(zip(CARD_FEATURE_NAMES, self.features, strict=True))


class Late(msgspec.Struct, frozen=True, gc=False):
    """Older than the card's max_ts minus the allowed lateness: neither scored nor folded."""

    reason: str
    behind_ms: int


Outcome = Accepted | Redelivered | Late
