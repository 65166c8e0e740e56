"""Every Kafka producer waits for all in-sync replicas (acks=all): on the cluster profile an
acknowledged message survives the loss of its leader."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    found = []
    for folder in ("app", "benchmarks", "tests/support"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    func = node.func
                    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    if called == name:
                        found.append((path, node))
    return found


def _keyword(call: ast.Call, name: str) -> object:
    for kw in call.keywords:
        if kw.arg == name:
            return ast.literal_eval(kw.value)
    return None


def test_every_aiokafka_producer_sends_with_acks_all() -> None:
    producers = _calls("AIOKafkaProducer")
    assert len(producers) >= 3  # replay, control publisher, benchmarks, test support
    for path, call in producers:
        assert _keyword(call, "acks") == "all", f"{path}:{call.lineno} without acks='all'"


def test_the_workers_faust_producer_sends_with_acks_all() -> None:
    apps = [(p, c) for p, c in _calls("App") if p.name == "app.py" and "stream" in p.parts]
    assert len(apps) == 1
    path, call = apps[0]
    assert _keyword(call, "producer_acks") == -1, f"{path}:{call.lineno}"
