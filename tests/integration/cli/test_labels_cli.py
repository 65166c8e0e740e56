"""`fraudstream labels --labels FILE` on real Kafka: valid rows to `labels`, bad ones to
`labels.dlq` with the reason, JSONL and Parquet alike; an unreadable file is one line and sends
nothing."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.harness.pipeline import read
from app.kafka import topics
from app.kafka.labelimport import H_SOURCE_LINE
from app.kafka.records import H_FIELD, H_REASON, H_REASON_CODE
from app.settings import Settings, settings_environ
from app.transactions.labels import LabelRecord

pytestmark = pytest.mark.integration

NOW_ISH = 1_760_000_000_000


def _run(settings: Settings, *args: str):  # noqa: ANN202 - click Result
    return CliRunner().invoke(cli, ["labels", "--labels", *args], env=settings_environ(settings))


def test_jsonl_labels_and_their_dead_letters(fresh_settings: Settings, tmp_path: Path) -> None:
    lines = [
        b'{"txn_id": "t-1", "label": 1, "reported_at": 1760000000000, "source": "chargeback"}',
        b'{"card_id": "c-2", "label": 0, "reported_at": "2025-10-09T08:53:20+00:00"}',
        b'{"txn_id": "t-3", "label": 7, "reported_at": 1760000000000}',
        b"",
        b"not json",
        b'{"txn_id": "t-4", "card_id": "c-4", "label": true, "reported_at": 1760000000000}',
    ]
    path = tmp_path / "labels.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = _run(fresh_settings, str(path))
    assert result.exit_code == 1, result.output
    assert "sent 3 labels, 2 rejected to labels.dlq (first: line 3: label: must be 0, 1" in (
        result.output)
    assert len(result.output.strip().splitlines()) == 1

    sent = [LabelRecord.from_json(r.value) for r in read(fresh_settings, topics.LABELS)]
    assert sorted(((x.txn_id, x.card_id, x.label, x.source) for x in sent), key=str) == [
        ("t-1", None, 1, "chargeback"), ("t-4", "c-4", 1, "import"), (None, "c-2", 0, "import")]
    assert all(x.reported_at_ms == NOW_ISH for x in sent)
    keys = {r.key for r in read(fresh_settings, topics.LABELS)}
    assert keys == {b"t-1", b"c-2", b"c-4"}
    dlq = sorted(read(fresh_settings, topics.LABELS_DLQ), key=lambda r: r.headers[H_SOURCE_LINE])
    assert [(r.value, r.headers[H_SOURCE_LINE], r.headers.get(H_FIELD)) for r in dlq] == [
        (lines[2], "3", "label"), (lines[4], "5", None)]
    assert all(r.headers[H_REASON_CODE] == "invalid_label" and r.headers[H_REASON] for r in dlq)

    # the same file again: the same label ids (readers keep the first of each)
    assert _run(fresh_settings, str(path)).exit_code == 1
    again = [LabelRecord.from_json(r.value) for r in read(fresh_settings, topics.LABELS)]
    assert {x.label_id for x in again} == {x.label_id for x in sent} and len(again) == 6


def test_parquet_labels(fresh_settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "labels.parquet"
    pq.write_table(pa.table({
        "txn_id": ["t-1", None, "t-3"],
        "card_id": [None, "c-2", None],
        "label": [1, 0, 5],
        "reported_at": pa.array([NOW_ISH, NOW_ISH, NOW_ISH], pa.timestamp("ms", tz="UTC")),
    }), path)
    result = _run(fresh_settings, str(path))
    assert result.exit_code == 1 and "sent 2 labels, 1 rejected" in result.output
    sent = sorted(((x.txn_id, x.card_id, x.label, x.reported_at_ms) for x in (
        LabelRecord.from_json(r.value) for r in read(fresh_settings, topics.LABELS))), key=str)
    assert sent == [("t-1", None, 1, NOW_ISH), (None, "c-2", 0, NOW_ISH)]
    (dead,) = read(fresh_settings, topics.LABELS_DLQ)
    assert orjson.loads(dead.value)["txn_id"] == "t-3" and dead.headers[H_FIELD] == "label"


def test_an_unreadable_file_is_one_line_and_sends_nothing(fresh_settings: Settings,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "labels.parquet"
    path.write_bytes(b"this is not parquet")
    result = _run(fresh_settings, str(path))
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and "not a readable Parquet" in (
        result.output)
    assert read(fresh_settings, topics.LABELS) == [] and read(fresh_settings,
                                                                topics.LABELS_DLQ) == []
    bad = _run(fresh_settings, str(path), "--source", "has space")
    assert bad.exit_code == 2 and "--source" in bad.output
