"""A model version activated mid-stream, and what the served rows must show of it."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from app.actions import Action
from app.harness.pipeline import read
from app.kafka import topics
from app.kafka.inspect import start_or_close
from app.scoring.oracle import OracleRun
from app.security.kafka import kafka_client_kwargs
from app.settings import Settings

#: How far the new version's output logit is moved: its scores differ from the base version's
#: on every row and its decisions on some (the activation must be seen in what is served).
LOGIT_SHIFT = 1.0
#: Live and oracle scores of the same model and provider agree to this.
SCORE_TOLERANCE = 1e-5


def add_shifted_version(model_dir: Path, target: Path, version: str, *,
                        thresholds: dict[str, float] | None = None) -> str:
    """Copy the registry at `model_dir` to `target` and add `version`: the default model with
    its output logit moved by LOGIT_SHIFT (different weights, same features; its card's
    thresholds, or `thresholds`): the MLP's last bias, or a tree ensemble's base value.
    Returns the default (base) version."""
    import hashlib

    import onnx
    from onnx import numpy_helper

    from app.scoring.registry import ModelRegistry

    shutil.copytree(model_dir, target)
    registry = ModelRegistry(target, device="cpu")
    base = registry.default_version()
    model = onnx.load(registry.path(base) / "model.onnx")
    trees = [n for n in model.graph.node if n.op_type == "TreeEnsembleClassifier"]
    if trees:  # the score is LOGISTIC(base value + the trees' sum)
        old = [a for a in trees[0].attribute if a.name == "base_values"]
        start = list(onnx.helper.get_attribute_value(old[0])) if old else [0.0]
        for a in old:
            trees[0].attribute.remove(a)
        trees[0].attribute.append(onnx.helper.make_attribute(
            "base_values", [v + LOGIT_SHIFT for v in start]))
    else:
        last_gemm = [n for n in model.graph.node if n.op_type == "Gemm"][-1]
        bias = next(i for i in model.graph.initializer if i.name == last_gemm.input[2])
        shifted = numpy_helper.to_array(bias) + np.float32(LOGIT_SHIFT)
        bias.CopyFrom(numpy_helper.from_array(shifted.astype(np.float32), bias.name))
    data = model.SerializeToString()
    card = dict(registry.card(base).raw)
    card["version"] = version
    if thresholds is not None:
        card["thresholds"] = dict(thresholds)
    card["model"] = {**card["model"], "sha256": hashlib.sha256(data).hexdigest(),
                     "bytes": len(data)}
    registry.add(version, data, card)
    return base


async def _end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(**kafka_client_kwargs(settings), enable_auto_commit=False,
                                isolation_level=settings.isolation_level)
    await start_or_close(consumer)
    try:
        await consumer._client.force_metadata_update()  # noqa: SLF001 - no public equivalent
        parts = consumer.partitions_for_topic(topic) or set()
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in sorted(parts)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


@dataclass
class Rollout:
    """`version` activated mid-stream over `base`; `oracles` score the log under each."""

    base: str
    version: str
    oracles: dict[str, OracleRun] = field(default_factory=dict)
    #: features.served end offsets (by partition) just before the activation was published
    published_at: dict[int, int] = field(default_factory=dict)
    evidence: dict[str, int] = field(default_factory=dict)

    def mark_published(self, settings: Settings) -> None:
        """Call right before publishing: every row written so far was served before it."""
        self.published_at = asyncio.run(_end_offsets(settings, settings.topic(
            topics.FEATURES_SERVED)))

    def _by_txn(self) -> dict[str, dict[str, tuple[float, list[Action]]]]:
        """version -> txn_id -> (oracle score, oracle actions)."""
        out: dict[str, dict[str, tuple[float, list[Action]]]] = {}
        for version, run in self.oracles.items():
            ids = run.offline.table.column("txn_id").to_pylist()
            per: dict[str, tuple[float, list[Action]]] = {
                txn: (float(score), []) for txn, score in zip(ids, run.scores.tolist(),
                                                               strict=True)}
            for action in run.actions:
                per[action.txn_id][1].append(action)
            out[version] = per
        return out

    def actions(self, rows: Sequence[dict[str, object]]) -> list[Action]:
        """The actions the pipeline must apply, in log order: for every served row, the
        oracle's actions of that transaction under the version that served it."""
        by_txn = self._by_txn()
        served: dict[str, set[str]] = {}
        for row in rows:
            served.setdefault(str(row["txn_id"]), set()).add(str(row["model_version"]))
        out: dict[str, Action] = {}
        for txn in self.oracles[self.base].offline.table.column("txn_id").to_pylist():
            for version in (self.base, self.version):
                if version in served.get(txn, ()):
                    for action in by_txn[version][txn][1]:
                        out.setdefault(action.idempotency_key, action)
        return list(out.values())

    def problems(self, settings: Settings) -> list[str]:
        """Every served row carries one of the two versions and its version's score; none
        served before the publication carries the new one; per source partition, once the new
        version served a row the base one never served again, and it served the last one."""
        records = read(settings, topics.FEATURES_SERVED)
        rows = [orjson.loads(r.value) for r in records]
        by_txn = self._by_txn()
        problems: list[str] = []
        unknown = {str(r["txn_id"]) for r in rows} - set(by_txn[self.base])
        if unknown:
            return [f"{len(unknown)} served transactions the oracle never scored"]
        versions = {str(r["model_version"]) for r in rows}
        if versions - {self.base, self.version}:
            problems.append(f"served under unknown versions {sorted(versions)}")
            return problems
        early = sum(1 for rec, row in zip(records, rows, strict=True)
                    if rec.offset < self.published_at.get(rec.partition, 0)
                    and row["model_version"] == self.version)
        if early:
            problems.append(f"{early} rows served under {self.version} before its activation")
        wrong = sum(1 for r in rows if abs(float(r["score"]) - by_txn[str(r["model_version"])]
                                           [str(r["txn_id"])][0]) > SCORE_TOLERANCE)
        if wrong:
            problems.append(f"{wrong} served scores are not their model version's (oracle)")
        per_partition: dict[int, list[str]] = {}
        for row in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
            per_partition.setdefault(int(row["partition"]), []).append(str(row["model_version"]))
        back = [p for p, seq in per_partition.items()
                if self.version in seq and self.base in seq[seq.index(self.version):]]
        if back:
            problems.append(f"partitions {back} went back to {self.base} after {self.version}")
        never = [p for p, seq in per_partition.items() if seq[-1] != self.version]
        if never:
            problems.append(f"partitions {never} never switched to {self.version}")
        new_rows = [r for r in rows if r["model_version"] == self.version]
        base_of = by_txn[self.base]
        self.evidence = {
            "served_before_switch": len(rows) - len(new_rows),
            "served_after_switch": len(new_rows),
            "scores_changed": sum(1 for r in new_rows if abs(
                float(r["score"]) - base_of[str(r["txn_id"])][0]) > SCORE_TOLERANCE),
            "decisions_changed": sum(1 for r in new_rows if [a.type for a in base_of[str(
                r["txn_id"])][1]] != [a.type for a in by_txn[self.version][str(r["txn_id"])][1]]),
        }
        if not (self.evidence["served_before_switch"] and self.evidence["served_after_switch"]):
            problems.append(f"no switch seen: {self.evidence}")
        if not (self.evidence["scores_changed"] and self.evidence["decisions_changed"]):
            problems.append(f"the new version changed no score or decision: {self.evidence}")
        return problems
