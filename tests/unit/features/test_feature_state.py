"""CardState against the brute-force oracle, plus lateness, redelivery, eviction and bytes."""

from __future__ import annotations

import struct
from unittest.mock import patch

import pytest
from feature_logs import BASE, L, card_logs, txn
from feature_oracle import Oracle, assert_same
from hypothesis import HealthCheck, given, settings

from app.features import state as state_module
from app.features.declaration import MAX_WINDOW_MS
from app.features.outcome import Accepted, Late, Redelivered
from app.features.state import FORMAT_VERSION, CardState


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(card_logs())
def test_incremental_state_equals_bruteforce_rescan(log: tuple) -> None:
    lateness, txns, roundtrips, compact_min = log
    oracle = Oracle(lateness)
    plain = CardState.empty()
    restored = CardState.empty()  # restarted from its bytes at random points
    with patch.object(state_module, "_COMPACT_MIN", compact_min):
        for t, restart in zip(txns, roundtrips, strict=True):
            want = oracle.apply(t)
            assert_same(plain.apply(t, allowed_lateness_ms=lateness), want)
            assert_same(restored.apply(t, allowed_lateness_ms=lateness), want)
            if restart:
                data = restored.to_bytes()
                restored = CardState.from_bytes(data)
                assert restored.to_bytes() == data
            assert plain.to_bytes() == restored.to_bytes()
            horizon = oracle.max_ts - MAX_WINDOW_MS - lateness
            assert len(plain) == sum(e.ts_ms >= horizon for e in oracle.accepted)
            assert plain.max_ts == oracle.max_ts


def test_late_event_is_reported_with_a_readable_reason_and_not_folded() -> None:
    state = CardState.empty()
    state.apply(txn(1, BASE + 1_000_000), allowed_lateness_ms=L)
    before = state.to_bytes()
    out = state.apply(txn(2, BASE + 1_000_000 - L - 1), allowed_lateness_ms=L)
    assert isinstance(out, Late)
    assert out.behind_ms == L + 1
    assert out.reason == (f"ts {BASE + 1_000_000 - L - 1} is {L + 1} ms behind the card's max_ts "
                          f"{BASE + 1_000_000} (allowed lateness {L} ms)")
    assert state.to_bytes() == before
    exact = state.apply(txn(3, BASE + 1_000_000 - L), allowed_lateness_ms=L)
    assert isinstance(exact, Accepted)
    # the max_ts event has ts > τ: it never counts for an earlier τ, whatever the window
    assert exact.as_dict()["count_24h"] == 1
    assert exact.as_dict()["ms_since_prev"] == -1


def test_replay_after_crash_scores_each_event_as_the_first_time() -> None:
    """State restored from the changelog is ahead of the input: re-read events are redeliveries."""
    log = [txn(i, BASE + i * 7_000_000 + (i % 3) * 1_000, 100 + i, f"m{i % 4}", "FR")
           for i in range(30)]
    state = CardState.empty()
    first = [state.apply(t, allowed_lateness_ms=L) for t in log]
    snapshot = state.to_bytes()
    restored = CardState.from_bytes(snapshot)
    for t, out in zip(log[18:], first[18:], strict=True):
        again = restored.apply(t, allowed_lateness_ms=L)
        assert isinstance(again, Redelivered)
        assert repr(again.features) == repr(out.features)
    assert restored.to_bytes() == snapshot


def test_redelivery_is_exact_after_the_events_it_counted_were_evicted() -> None:
    state = CardState.empty()
    state.apply(txn("a", BASE + 1, 50), allowed_lateness_ms=L)
    first = state.apply(txn("b", BASE + MAX_WINDOW_MS, 70), allowed_lateness_ms=L)
    assert isinstance(first, Accepted) and first.as_dict()["count_24h"] == 2
    # max_ts − 24h − L = BASE + 24h − 1: "a" is evicted, "b" is still remembered
    state.apply(txn("c", BASE + 2 * MAX_WINDOW_MS + L - 1, 10), allowed_lateness_ms=L)
    assert len(state) == 2
    again = state.apply(txn("b", BASE + MAX_WINDOW_MS, 70), allowed_lateness_ms=L)
    assert isinstance(again, Redelivered)
    assert again.features == first.features
    # a forgotten txn_id falls to the normal rules: it is late
    assert isinstance(state.apply(txn("a", BASE + 1, 50), allowed_lateness_ms=L), Late)


def test_state_stays_bounded_on_a_long_in_order_run() -> None:
    state = CardState.empty()
    minute = 60_000
    for i in range(4 * 24 * 60):
        out = state.apply(txn(i, BASE + i * minute, 1 + i % 97), allowed_lateness_ms=L)
        assert isinstance(out, Accepted)
    per_window = MAX_WINDOW_MS // minute
    assert len(state) <= per_window + L // minute + 1
    assert out.as_dict()["count_24h"] == per_window
    assert out.as_dict()["count_1h"] == 60
    assert out.as_dict()["ms_since_prev"] == minute
    restored = CardState.from_bytes(state.to_bytes())
    nxt = txn("next", BASE + 4 * 24 * 60 * minute, 5)
    assert repr(restored.apply(nxt, allowed_lateness_ms=L)) == repr(
        state.apply(nxt, allowed_lateness_ms=L))


def test_from_bytes_refuses_other_formats_and_truncation() -> None:
    state = CardState.empty()
    state.apply(txn(1, BASE), allowed_lateness_ms=L)
    data = state.to_bytes()
    assert data[0] == FORMAT_VERSION
    with pytest.raises(ValueError, match="format"):
        CardState.from_bytes(bytes([FORMAT_VERSION + 1]) + data[1:])
    with pytest.raises(ValueError, match="another feature declaration"):
        CardState.from_bytes(data[:1] + struct.pack("<I", 12345) + data[5:])
    with pytest.raises(ValueError, match="truncated"):
        CardState.from_bytes(data[:-1])
    with pytest.raises(ValueError, match="too short"):
        CardState.from_bytes(b"\x01")
    assert CardState.from_bytes(CardState.empty().to_bytes()).max_ts is None


def test_apply_refuses_nul_in_ids_and_negative_lateness() -> None:
    with pytest.raises(ValueError, match="NUL"):
        CardState.empty().apply(txn("x\x00y", BASE), allowed_lateness_ms=L)
    with pytest.raises(ValueError, match="allowed_lateness_ms"):
        CardState.empty().apply(txn(1, BASE), allowed_lateness_ms=-1)
