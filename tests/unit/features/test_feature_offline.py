"""The offline evaluator agrees with the online state and the oracle on interleaved card logs."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from feature_logs import BASE, L, card_logs, txn
from feature_oracle import Oracle, assert_same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.features.declaration import FEATURE_DTYPES, FEATURE_NAMES
from app.features.merchant import EMPTY as NO_LABELS
from app.features.offline import compute_features, feature_schema, read_log, write_table
from app.features.outcome import Accepted, Late, Redelivered
from app.features.state import CardState
from app.transactions.contract import Transaction

NOW = BASE + 10**11


@st.composite
def interleaved_logs(draw: st.DrawFn) -> list[Transaction]:
    """Three cards' logs merged in a random order that keeps each card's own order."""
    cards = [draw(card_logs(lateness=L, card=f"c{k}", max_size=25))[1] for k in range(3)]
    order = draw(st.permutations([k for k, log in enumerate(cards) for _ in log]))
    cursors = [0, 0, 0]
    merged = []
    for k in order:
        merged.append(cards[k][cursors[k]])
        cursors[k] += 1
    return merged


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleaved_logs())
def test_offline_equals_online_and_oracle_on_interleaved_cards(log: list[Transaction]) -> None:
    lines = [t.to_json() for t in log]
    lines.insert(len(lines) // 2, b'{"txn_id": "broken"')
    result = compute_features(lines, allowed_lateness_ms=L, now_ms=NOW)

    oracles: dict[str, Oracle] = {}
    stored: dict[str, bytes] = {}  # online: the stream's way, state through bytes every event
    expected_rows = []
    late = redelivered = 0
    for t in log:
        want = oracles.setdefault(t.card_id, Oracle(L)).apply(t)
        state = CardState.from_bytes(stored[t.card_id]) if t.card_id in stored else CardState.empty()
        got = state.apply(t, allowed_lateness_ms=L)
        stored[t.card_id] = state.to_bytes()
        assert_same(got, want)
        if isinstance(want, Accepted):
            expected_rows.append((t.txn_id, t.card_id, t.ts_ms, *want.features, *NO_LABELS))
        late += isinstance(want, Late)
        redelivered += isinstance(want, Redelivered)

    table = result.table
    assert table.schema == feature_schema()
    rows = list(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))
    assert repr(rows) == repr(expected_rows)
    assert (result.accepted, result.late, result.redelivered) == (len(rows), late, redelivered)
    assert result.malformed == {"invalid_json": 1}


def test_schema_has_keys_then_every_feature_with_its_declared_dtype() -> None:
    schema = feature_schema()
    assert schema.names == ["txn_id", "card_id", "ts_ms", *FEATURE_NAMES]
    for name in FEATURE_NAMES:
        assert str(schema.field(name).type) == {"int64": "int64", "float64": "double"}[
            FEATURE_DTYPES[name]]


def test_malformed_lines_are_counted_by_reason_with_best_effort_txn_ids() -> None:
    good = txn(1, BASE).to_json()
    extra = orjson.loads(good) | {"txn_id": "t-bad", "extra": 1}
    lines = [good, b"not json", orjson.dumps(extra), b"[1]", b"x" * 9000, good]
    result = compute_features(lines, allowed_lateness_ms=L, now_ms=NOW)
    assert result.malformed == {"invalid_json": 1, "unknown_field": 1, "not_object": 1,
                                "too_large": 1}
    assert result.malformed_txn_ids == {"t-bad"}
    assert (result.accepted, result.redelivered, result.lines) == (1, 1, 6)
    assert "malformed=4" in result.summary()


def test_empty_log_gives_an_empty_table_with_the_schema() -> None:
    result = compute_features([], allowed_lateness_ms=L, now_ms=NOW)
    assert result.table.num_rows == 0
    assert result.table.schema == feature_schema()


def test_jsonl_and_parquet_logs_read_the_same(tmp_path) -> None:
    log = [txn(i, BASE + i * 20_000, 10 + i, f"m{i % 3}", "FR", f"c{i % 2}") for i in range(50)]
    jsonl = tmp_path / "events.jsonl"
    jsonl.write_bytes(b"".join(t.to_json() + b"\n" for t in log))
    parquet = tmp_path / "events.parquet"
    pq.write_table(pa.Table.from_pylist([t.to_dict() for t in log]), parquet)
    assert [orjson.loads(m) for m in read_log(jsonl)] == [t.to_dict() for t in log]
    from_jsonl = compute_features(read_log(jsonl), allowed_lateness_ms=L, now_ms=NOW)
    from_parquet = compute_features(read_log(parquet), allowed_lateness_ms=L, now_ms=NOW)
    assert from_jsonl.table.equals(from_parquet.table)
    assert from_jsonl.accepted == 50
    with pytest.raises(ValueError, match="unknown log format"):
        read_log(tmp_path / "events.csv")


def test_every_jsonl_line_is_a_message_even_an_empty_one(tmp_path) -> None:
    """As `replay` sends them: split on newline only, so blank lines reach the DLQ too."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(txn(1, BASE).to_json() + b"\n\n  \n" + txn(2, BASE).to_json())
    assert list(read_log(path)) == [txn(1, BASE).to_json(), b"", b"  ", txn(2, BASE).to_json()]
    result = compute_features(read_log(path), allowed_lateness_ms=L, now_ms=NOW)
    assert (result.accepted, result.malformed) == (2, {"invalid_json": 2})


def test_written_tables_read_back_bit_for_bit(tmp_path) -> None:
    log = [txn(i, BASE + i * 7_000, 1 + i * 37 % 11) for i in range(30)]
    table = compute_features([t.to_json() for t in log], allowed_lateness_ms=L, now_ms=NOW).table
    write_table(table, tmp_path / "f.parquet")
    assert pq.read_table(tmp_path / "f.parquet").equals(table)
    write_table(table, tmp_path / "f.jsonl")
    back = [orjson.loads(line) for line in (tmp_path / "f.jsonl").read_bytes().splitlines()]
    assert repr(back) == repr(table.to_pylist())
    with pytest.raises(ValueError, match="unknown output format"):
        write_table(table, tmp_path / "f.csv")
