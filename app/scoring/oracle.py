"""The offline oracle: the same features, model and policy over a log → the actions it must yield.

Per line in log order: malformed and late lines yield nothing; a redelivered transaction
yields nothing more (online it re-sends the same idempotency keys, which the action service
absorbs); every accepted transaction is scored once and decided by the policy. Actions carry
decided_at_ms = the transaction's ts_ms (the oracle has no wall clock; the action contract
needs a real timestamp, so 0 is not an option). Compare live and oracle actions by
(idempotency_key, type, card_id, txn_id, ts_ms), and score/model_version when the same
model ran on the same provider; never by decided_at_ms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from app.actions import ACTION_TYPES, Action
from app.actions.explanation import Contribution
from app.features.declaration import FEATURE_NAMES
from app.features.merchant import MerchantTable
from app.features.offline import OfflineResult, compute_features
from app.rules.language import TXN_FIELDS, Columns
from app.rules.ruleset import EMPTY as NO_RULES
from app.rules.ruleset import RuleSet, listed
from app.scoring.explain import explainer_for
from app.scoring.lists import EMPTY, ListEntry, Lists
from app.scoring.policy import BOUNDARY_EPS, Thresholds, build_actions, decide
from app.scoring.registry import LoadedModel, ModelRegistry
from app.scoring.scorer import features_matrix
from app.transactions.contract import DEFAULT_MAX_BYTES

#: Rows scored per session call (memory bound; CPU scores do not depend on it).
CHUNK_ROWS: Final = 65_536


@dataclass(frozen=True, slots=True)
class _Txn:
    txn_id: str
    card_id: str
    ts_ms: int


@dataclass(frozen=True, slots=True)
class OracleRun:
    """The oracle's actions and what it saw on the way."""

    actions: list[Action]
    model_version: str
    thresholds: Thresholds
    offline: OfflineResult
    scores: np.ndarray  # float32, one per accepted row (offline.table order)
    boundary_txn_ids: frozenset[str]  # scores within policy.BOUNDARY_EPS of a threshold

    @property
    def counts(self) -> dict[str, int]:
        """Actions per type (every type listed)."""
        seen = Counter(a.type for a in self.actions)
        return {t: seen.get(t, 0) for t in ACTION_TYPES}

    def served_rows(self) -> Iterator[dict[str, Any]]:
        """A features.served-shaped row per scored transaction (audit-skew reads them)."""
        table = self.offline.table
        ids = table.column("txn_id").to_pylist()
        cards = table.column("card_id").to_pylist()
        times = table.column("ts_ms").to_pylist()
        columns = [table.column(n).to_pylist() for n in FEATURE_NAMES]
        for i, values in enumerate(zip(*columns, strict=True)):
            yield {
                "txn_id": ids[i], "card_id": cards[i], "ts_ms": times[i],
                "features": dict(zip(FEATURE_NAMES, values, strict=True)),
                "score": float(self.scores[i]), "model_version": self.model_version,
                "redelivered": False,
            }


def score_table(model: LoadedModel, offline: OfflineResult) -> np.ndarray:
    """Scores of every accepted row, via the shared features_matrix conversion."""
    table = offline.table
    parts = []
    for start in range(0, table.num_rows, CHUNK_ROWS):
        chunk = table.slice(start, CHUNK_ROWS)
        columns = [chunk.column(n).to_pylist() for n in FEATURE_NAMES]
        parts.append(model.scorer.score(features_matrix(list(zip(*columns, strict=True)))))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def run_oracle(
    lines: Iterable[bytes] | str | Path,
    model: LoadedModel | ModelRegistry,
    *,
    allowed_lateness_ms: int,
    now_ms: int,
    version: str | None = None,
    thresholds: Thresholds | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: Callable[[int], None] | None = None,
    explain: bool = True,
    lists: Lists = EMPTY,
    extra: tuple[str, ...] = (),
    merchants: MerchantTable | None = None,
    rules: RuleSet = NO_RULES,
) -> OracleRun:
    """Features → scores → allow/block `lists`, `rules` and policy over a log (raw messages or
    a log file), in log order; with `explain`, each action carries its explanation, computed as
    the worker computes it. `extra` transaction fields are kept in the offline table;
    `merchants`: the label log's merchant features (None: as without any label)."""
    loaded = model if isinstance(model, LoadedModel) else model.load(version)
    policy = loaded.thresholds if thresholds is None else thresholds
    if lists.entries and "merchant_id" not in extra:
        extra = (*extra, "merchant_id")
    extra = (*extra, *sorted((rules.names & TXN_FIELDS.keys()) - {"card_id", "ts_ms", *extra}))
    offline = compute_features(lines, allowed_lateness_ms=allowed_lateness_ms, now_ms=now_ms,
                               max_bytes=max_bytes, progress=progress, extra=extra,
                               merchants=merchants)
    scores = score_table(loaded, offline)
    actions, boundary = decide_rows(loaded, offline, scores, policy, lists=lists,
                                    explain=explain, rules=rules)
    return OracleRun(actions, loaded.version, policy, offline, scores, boundary)


def rule_columns(offline: OfflineResult, scores: np.ndarray,
                 entries: dict[int, ListEntry]) -> Columns:
    """The offline table as the rules read it (the worker's batch, all rows at once)."""
    table = offline.table
    n = table.num_rows

    def get(name: str) -> np.ndarray:
        if name == "score":
            return scores.astype(np.float64)
        if name == "hour":
            return ((table.column("ts_ms").to_numpy() // 3_600_000) % 24).astype(np.float64)
        column = table.column(name)
        if TXN_FIELDS.get(name) == "string":
            return np.array(column.to_pylist(), dtype=object)
        if name in TXN_FIELDS:  # as the log reader typed it (mcc is read as text)
            return np.array(column.to_pylist(), dtype=np.float64)
        return column.to_numpy().astype(np.float64)

    full = [entries.get(i) for i in range(n)] if entries else None
    return Columns(n, get, listed(full, n))


def decide_rows(model: LoadedModel, offline: OfflineResult, scores: np.ndarray,
                policy: Thresholds, *, lists: Lists = EMPTY, explain: bool = True,
                rules: RuleSet = NO_RULES) -> tuple[list[Action], frozenset[str]]:
    """The actions of scored rows under `lists`, `rules` and `policy` (as the worker builds
    them), and the txn_ids of boundary decisions. Lists need the table's merchant_id column,
    rules the transaction fields they read."""
    table = offline.table
    actions: list[Action] = []
    # Only rows the policy acts on (score >= alert) or a list names can yield an action: the
    # others are skipped in numpy, not one by one (decide() gives them nothing; NaN too).
    wide = scores.astype(np.float64)
    picked = wide >= policy.alert
    entries: dict[int, ListEntry] = {}
    if lists.entries:
        merchants = table.column("merchant_id").to_pylist()
        for i, (card_id, merchant_id) in enumerate(zip(table.column("card_id").to_pylist(),
                                                       merchants, strict=True)):
            entry = lists.match(card_id, merchant_id)
            if entry is not None:
                entries[i] = entry
                picked[i] = True
    deciding = (rules.evaluate_columns(rule_columns(offline, wide, entries)).deciding
                if rules.rules else np.full(len(wide), -1, dtype=np.int64))
    picked |= deciding >= 0
    near = (np.abs(wide - policy.freeze) <= BOUNDARY_EPS) | (
        np.abs(wide - policy.alert) <= BOUNDARY_EPS)
    boundary = frozenset(table.column("txn_id").take(np.flatnonzero(near)).to_pylist())
    rows = np.flatnonzero(picked)
    ids, cards, times = (table.column(n).take(rows).to_pylist()
                         for n in ("txn_id", "card_id", "ts_ms"))
    explanations = (_explanations(model, offline, scores, policy, deciding) if explain
                    else {})
    for i, txn_id, card_id, ts_ms, score in zip(rows.tolist(), ids, cards, times,
                                                wide[rows].tolist(), strict=True):
        by_rule = rules.rules[deciding[i]] if deciding[i] >= 0 else None
        actions.extend(build_actions(_Txn(txn_id, card_id, ts_ms), score, model.version, ts_ms,
                                     thresholds=policy, explanation=explanations.get(i),
                                     entry=entries.get(i), deciding=by_rule))
    return actions, boundary


def _explanations(model: LoadedModel, offline: OfflineResult, scores: np.ndarray,
                  policy: Thresholds, deciding: np.ndarray
                  ) -> dict[int, tuple[Contribution, ...]]:
    """The explanation of every row that produces an action (by row index): the worker's
    rows (the model decides, or an active rule does)."""
    explainer = explainer_for(model)
    rows = [i for i, score in enumerate(scores.tolist()) if decide(score, policy)
            or deciding[i] >= 0]
    if explainer is None or not rows:
        return {}
    picked = offline.table.take(rows)
    values = list(zip(*(picked.column(n).to_pylist() for n in FEATURE_NAMES), strict=True))
    found = explainer.explain(features_matrix(values), scores[rows], values)
    return dict(zip(rows, found, strict=True))


def oracle_actions(
    lines: Iterable[bytes],
    model: LoadedModel | ModelRegistry,
    *,
    allowed_lateness_ms: int,
    now_ms: int,
    version: str | None = None,
    thresholds: Thresholds | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[Action]:
    """The actions the live system must produce for `lines`, in log order."""
    return run_oracle(lines, model, allowed_lateness_ms=allowed_lateness_ms, now_ms=now_ms,
                      version=version, thresholds=thresholds, max_bytes=max_bytes).actions
