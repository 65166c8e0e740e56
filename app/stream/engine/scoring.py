"""The score agent's second half: score a batch with the active model, emit served rows and actions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from app.actions.explanation import Contribution
from app.kafka import topics
from app.kafka.records import H_SOURCE_APPENDED_MS, OutRecord
from app.rules.ruleset import EMPTY as NO_RULES
from app.rules.ruleset import RuleSet
from app.scoring.explain import Explainer, explainer_for
from app.scoring.lists import EMPTY, Lists
from app.scoring.policy import Thresholds, build_actions, decide
from app.scoring.registry import LoadedModel
from app.scoring.scorer import features_matrix
from app.settings import Settings
from app.stream import metrics
from app.stream.engine.drift import DriftStage
from app.stream.engine.pipeline import Scored, served_records
from app.stream.engine.shadow import ShadowStage

log = logging.getLogger(__name__)


class ScoringStage:
    """Holds the active model; a new one is swapped in only between batches."""

    def __init__(self, model: LoadedModel, settings: Settings, clock_ms: Callable[[], int]) -> None:
        self.settings = settings
        self.clock_ms = clock_ms
        self._pending: LoadedModel | None = None
        #: The allow/block lists and the rules, replaced whole by app.stream.feeds.controlfeed (read
        #: once per batch; a new set applies from the next batch on).
        self.lists: Lists = EMPTY
        #: the control offset the lists were read through, and per source partition the first
        #: offset decided with them: where each partition switched (the debug page shows it)
        self.lists_offset = -1
        self.lists_from: dict[int, int] = {}
        self.rules: RuleSet = NO_RULES
        self.model = model
        self.drift = DriftStage(settings)
        self.shadow = ShadowStage()
        self._install(model)

    def _install(self, model: LoadedModel) -> None:
        previous = getattr(self, "_active", None)
        if previous is not None:
            metrics.SCORER_PROVIDER.labels(previous.scorer.active_provider, previous.version).set(0)
        self._active = model
        self.drift.install(model)
        self._explainer: Explainer | None = (explainer_for(model) if self.settings.explain
                                             else None)
        self.thresholds: Thresholds = model.thresholds.override(
            freeze=self.settings.freeze_threshold, alert=self.settings.alert_threshold)
        metrics.SCORER_PROVIDER.labels(model.scorer.active_provider, model.version).set(1)
        log.info("scoring with model %s on %s (freeze >= %s, alert >= %s)", model.version,
                 model.scorer.active_provider, self.thresholds.freeze, self.thresholds.alert)

    @property
    def version(self) -> str:
        return self._active.version

    def warm(self, max_rows: int) -> None:
        """Run the active model once per batch size class before the first batch."""
        warm = getattr(self._active.scorer, "warm_up", None)
        if warm is not None:
            warm(max_rows)

    def install_lists(self, lists: Lists, offset: int) -> None:
        """The lists as read through control offset `offset`, for the next batch on."""
        self.lists = lists
        self.lists_offset = offset
        self.lists_from = {}
        log.info("allow/block lists through control offset %d: %d entries", offset, len(lists))

    def install_rules(self, rules: RuleSet, offset: int) -> None:
        """The rules as read through control offset `offset`, for the next batch on."""
        self.rules = rules
        log.info("rules through control offset %d: %s", offset,
                 ", ".join(f"{r.name} ({r.mode})" for r in rules.rules) or "none")

    def offer(self, model: LoadedModel) -> None:
        """Queue a validated model; it becomes active at the start of the next batch."""
        self._pending = model

    def run(self, scored: Sequence[Scored]) -> list[OutRecord]:
        """Score `scored` in one call; served rows for all, actions where the policy says so."""
        if self._pending is not None:
            self._install(self._pending)
            self._pending = None
        if not scored:
            return []
        model = self._active
        matrix = features_matrix([s.features for s in scored])
        scores = model.scorer.score(matrix)
        self.drift.observe(scored, matrix, scores)
        decided_at = self.clock_ms()
        lists, rules, thresholds = self.lists, self.rules, self.thresholds
        first = self.lists_from
        for s in scored:  # in source order per partition: the first one seen is the switch
            first.setdefault(s.source.partition, s.source.offset)
        entries = ([lists.match(s.txn.card_id, s.txn.merchant_id) for s in scored]
                   if lists.entries else None)
        deciding = self._rules(rules, scored, scores, entries)
        explanations = self._explain(scored, matrix, scores, deciding)
        out: list[OutRecord] = []
        version = model.version
        values = scores.tolist()
        served = served_records(scored, values, version)
        for i, (item, score) in enumerate(zip(scored, values, strict=True)):
            out.append(served[i])
            entry = entries[i] if entries is not None else None
            by_rule = rules.rules[deciding[i]] if deciding is not None and deciding[i] >= 0 \
                else None
            if entry is None and by_rule is None and not decide(score, thresholds):
                continue  # most rows: nothing decided, no list entry, no rule, no actions
            actions = build_actions(item.txn, score, version, decided_at,
                                    thresholds=thresholds, explanation=explanations.get(i),
                                    entry=entry, deciding=by_rule)
            if not actions:
                continue
            # when the transaction reached Kafka, for the event → effect latency at dispatch
            appended = getattr(item.source, "timestamp", None)
            headers = (() if appended is None else
                       ((H_SOURCE_APPENDED_MS, str(int(appended * 1000)).encode()),))
            for action in actions:
                metrics.ACTIONS_EMITTED.labels(action.type).inc()
                out.append(OutRecord(topics.ACTIONS, item.txn.card_id.encode(), action.to_json(),
                                     headers, item.source.partition))
        # a shadow model, when set: one more model call, rows to features.shadow, no actions
        out.extend(self.shadow.run(scored, matrix, scores, active_version=model.version,
                                   active=self.thresholds))
        return out

    @staticmethod
    def _rules(rules: RuleSet, scored: Sequence[Scored], scores: np.ndarray,
               entries: list[Any] | None) -> np.ndarray | None:
        """Per row the index of the active rule that decides it (-1: none); hits counted."""
        if not rules.rules:
            return None
        found = rules.evaluate(scored, scores, entries)
        for r, hits in zip(rules.rules, found.hits, strict=True):
            if hits:
                metrics.RULE_HITS.labels(r.id, str(r.version), r.mode).inc(hits)
        return found.deciding

    def _explain(self, scored: Sequence[Scored], matrix: np.ndarray, scores: np.ndarray,
                 deciding: np.ndarray | None = None) -> dict[int, tuple[Contribution, ...]]:
        """Explanations of the rows that produce an action (by row index), in one scorer call;
        the other rows cost one threshold comparison."""
        if self._explainer is None:
            return {}
        rows = [i for i, raw in enumerate(scores.tolist()) if decide(raw, self.thresholds)
                or (deciding is not None and deciding[i] >= 0)]
        if not rows:
            return {}
        found = self._explainer.explain(matrix[rows], scores[rows],
                                        [scored[i].features for i in rows])
        return dict(zip(rows, found, strict=True))
