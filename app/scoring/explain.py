"""Why a transaction scored what it did: occlusion against the training reference.

For a feature vector x with score s = f(x), the contribution of feature j is

    c_j = f(x) - f(x with x_j replaced by r_j)

where r_j is the training reference of feature j: the value whose standardised model input is 0,
i.e. the training rows' mean in the model's own input space (`exp(mean_j) - 1`, read from the
ONNX graph's `mean` initializer: the graph scales z = (log(1 + max(x, 0)) - mean) / std). A
tree model has no such layer: its card carries the same quantity computed from its training
rows (`model.occlusion_reference`). So c_j
says how much of the score this feature's value adds (or removes) compared with a typical
training row, all else equal. The explanation is the TOP features by |c_j| (ties: declaration
order), each with its value and contribution.

Deterministic: the occluded rows go through the same scorer, which on CPU is bit identical
whatever the batch (app.scoring.scorer), so the worker and the offline oracle give the same
explanation for the same transaction. Cost: one extra model row per feature, computed only for
transactions that produce an action (20 rows per action with the declared features), scored in
one call per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from app.actions.explanation import Contribution
from app.features.declaration import FEATURE_NAMES
from app.scoring.card import MODEL_FILE
from app.scoring.registry import LoadedModel
from app.scoring.scorer import Scorer

#: Features reported per explanation (an explanation names at least 3).
TOP: Final = 5


def reference_from_onnx(path: Path) -> np.ndarray:
    """The training reference r (float32, one per feature) of a model file: expm1 of the
    graph's `mean` initializer (see the module docstring)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    for init in model.graph.initializer:
        if init.name == "mean":
            mean = numpy_helper.to_array(init).astype(np.float64)
            return np.expm1(mean).astype(np.float32)
    raise ValueError(f"{path}: no 'mean' initializer to take the training reference from")


class Explainer:
    """Occlusion explanations for one model (its scorer and its training reference)."""

    def __init__(self, scorer: Scorer, reference: np.ndarray,
                 names: Sequence[str] = FEATURE_NAMES, top: int = TOP) -> None:
        if reference.shape != (len(names),):
            raise ValueError(f"reference has shape {reference.shape}, expected ({len(names)},)")
        self._scorer = scorer
        self._reference = reference.astype(np.float32)
        self._names = tuple(names)
        self._top = top
        self._grow(64)

    def _grow(self, rows: int) -> None:
        """Index arrays of the occlusion scatter for up to `rows` explained rows at once."""
        width = len(self._names)
        self._capacity = rows
        self._rows = np.arange(rows * width)
        self._columns = np.tile(np.arange(width), rows)
        self._tiled = np.tile(self._reference, rows)

    def explain(self, matrix: np.ndarray, scores: np.ndarray,
                values: Sequence[Sequence[float | int]]) -> list[tuple[Contribution, ...]]:
        """The explanation of each row of `matrix` (the model input, float32 [n, F]) whose
        score is `scores[i]`; `values` are the rows' feature values as served."""
        n, width = matrix.shape
        if n == 0:
            return []
        if n > self._capacity:
            self._grow(max(n, 2 * self._capacity))
        # n blocks of F rows: block i is row i F times, with feature j set to r_j in its row j
        occluded = np.repeat(matrix, width, axis=0)
        occluded[self._rows[: n * width], self._columns[: n * width]] = self._tiled[: n * width]
        moved = self._scorer.score(occluded).tolist()
        names, top = self._names, self._top
        out = []
        for i, base in enumerate(np.asarray(scores, dtype=np.float64).tolist()):
            # contributions as doubles of float32 scores: exact differences, deterministic
            row = [base - m for m in moved[i * width:(i + 1) * width]]
            # the largest |c| first; ties keep declaration order (sorted is stable)
            order = sorted(range(width), key=lambda j, r=row: -abs(r[j]))[:top]
            out.append(tuple(Contribution(names[j], values[i][j], row[j]) for j in order))
        return out


def explanation_dicts(explanation: Sequence[Contribution]) -> list[dict[str, Any]]:
    """An explanation as JSON-ready dicts (the action's `explanation` field)."""
    return [c.to_dict() for c in explanation]


def explainer_for(model: LoadedModel) -> Explainer | None:
    """The Explainer of a loaded model, or None when neither its graph nor its card has a
    training reference (a model kind this method does not know); the caller then emits actions
    without one. Tree models carry it in the card (`model.occlusion_reference`)."""
    carried = model.card.raw.get("model", {}).get("occlusion_reference")
    if isinstance(carried, list) and len(carried) == len(FEATURE_NAMES):
        return Explainer(model.scorer, np.asarray(carried, dtype=np.float32))
    try:
        reference = reference_from_onnx(model.path / MODEL_FILE)
    except (ValueError, OSError):
        return None
    return Explainer(model.scorer, reference)
