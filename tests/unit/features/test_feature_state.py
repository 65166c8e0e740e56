"""CardState against the brute-force oracle, plus lateness, redelivery, eviction and bytes.

Every test runs on both states: the Python CardState (the definition) and its compiled twin
(app/features/_state.c, what the stream folds with), through the `state_cls` fixture.
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from unittest.mock import patch

import pytest
from feature_logs import BASE, L, card_logs, txn
from feature_oracle import Oracle, assert_same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.features import state as state_module
from app.features.declaration import MAX_WINDOW_MS
from app.features.outcome import Accepted, Late, Redelivered
from app.features.state import FORMAT_VERSION, CardState, CompiledCardState
from app.features.vector import LAYOUT, derive

STATES = [pytest.param(CardState, id="python"),
          pytest.param(CompiledCardState, id="compiled", marks=pytest.mark.skipif(
              CompiledCardState is None, reason="app.features._state is not built"))]


@pytest.fixture(params=STATES)
def state_cls(request: pytest.FixtureRequest) -> type[CardState]:
    return request.param


@contextmanager
def compaction_after(n: int) -> Iterator[None]:
    """Compact the evicted head slots after `n` of them, in both states."""
    with patch.object(state_module, "_COMPACT_MIN", n):
        if state_module._state is None:
            yield
            return
        old = state_module._state.set_compact_min(n)
        try:
            yield
        finally:
            state_module._state.set_compact_min(old)


# 1,200 per state class: the CI time budget (30 min); the compiled state is also held to the
# Python one step by step below, and the fold to both in test_feature_kernel.py
@settings(max_examples=1200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(card_logs())
def test_incremental_state_equals_bruteforce_rescan(state_cls: type[CardState], log: tuple) -> None:
    lateness, txns, roundtrips, compact_min = log
    oracle = Oracle(lateness)
    plain = state_cls.empty()
    restored = state_cls.empty()  # restarted from its bytes at random points
    with compaction_after(compact_min):
        for t, restart in zip(txns, roundtrips, strict=True):
            want = oracle.apply(t)
            assert_same(plain.apply(t, allowed_lateness_ms=lateness), want)
            assert_same(restored.apply(t, allowed_lateness_ms=lateness), want)
            if restart:
                data = restored.to_bytes()
                restored = state_cls.from_bytes(data)
                assert restored.to_bytes() == data
            assert plain.to_bytes() == restored.to_bytes()
            horizon = oracle.max_ts - MAX_WINDOW_MS - lateness
            assert len(plain) == sum(e.ts_ms >= horizon for e in oracle.accepted)
            assert plain.max_ts == oracle.max_ts


def test_late_event_is_reported_with_a_readable_reason_and_not_folded(state_cls: type[CardState]) -> None:
    state = state_cls.empty()
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


def test_replay_after_crash_scores_each_event_as_the_first_time(state_cls: type[CardState]) -> None:
    """State restored from the changelog is ahead of the input: re-read events are redeliveries."""
    log = [txn(i, BASE + i * 7_000_000 + (i % 3) * 1_000, 100 + i, f"m{i % 4}", "FR")
           for i in range(30)]
    state = state_cls.empty()
    first = [state.apply(t, allowed_lateness_ms=L) for t in log]
    snapshot = state.to_bytes()
    restored = state_cls.from_bytes(snapshot)
    for t, out in zip(log[18:], first[18:], strict=True):
        again = restored.apply(t, allowed_lateness_ms=L)
        assert isinstance(again, Redelivered)
        assert repr(again.features) == repr(out.features)
    assert restored.to_bytes() == snapshot


def test_redelivery_is_exact_after_the_events_it_counted_were_evicted(state_cls: type[CardState]) -> None:
    state = state_cls.empty()
    state.apply(txn("a", BASE + 1, 50), allowed_lateness_ms=L)
    first = state.apply(txn("b", BASE + MAX_WINDOW_MS, 70), allowed_lateness_ms=L)
    assert isinstance(first, Accepted) and first.as_dict()["count_30d"] == 2
    # max_ts − 30d − L = BASE + 30d − 1: "a" is evicted, "b" is still remembered
    state.apply(txn("c", BASE + 2 * MAX_WINDOW_MS + L - 1, 10), allowed_lateness_ms=L)
    assert len(state) == 2
    again = state.apply(txn("b", BASE + MAX_WINDOW_MS, 70), allowed_lateness_ms=L)
    assert isinstance(again, Redelivered)
    assert again.features == first.features
    # a forgotten txn_id falls to the normal rules: it is late
    assert isinstance(state.apply(txn("a", BASE + 1, 50), allowed_lateness_ms=L), Late)


def test_state_stays_bounded_on_a_long_in_order_run(state_cls: type[CardState]) -> None:
    state = state_cls.empty()
    minute = 60_000
    step = 30 * minute  # the longest window is 30 days: four of them, an event every 30 min
    for i in range(4 * 30 * 48):
        out = state.apply(txn(i, BASE + i * step, 1 + i % 97), allowed_lateness_ms=L)
        assert isinstance(out, Accepted)
    per_window = MAX_WINDOW_MS // step
    assert len(state) <= per_window + L // step + 1
    assert out.as_dict()["count_30d"] == per_window
    assert out.as_dict()["count_24h"] == 48
    assert out.as_dict()["count_1h"] == 2
    assert out.as_dict()["ms_since_prev"] == step
    restored = state_cls.from_bytes(state.to_bytes())
    nxt = txn("next", BASE + 4 * 30 * 48 * step, 5)
    assert repr(restored.apply(nxt, allowed_lateness_ms=L)) == repr(
        state.apply(nxt, allowed_lateness_ms=L))


def test_from_bytes_refuses_other_formats_and_truncation(state_cls: type[CardState]) -> None:
    state = state_cls.empty()
    state.apply(txn(1, BASE), allowed_lateness_ms=L)
    data = state.to_bytes()
    assert data[0] == FORMAT_VERSION
    with pytest.raises(ValueError, match="format"):
        state_cls.from_bytes(bytes([FORMAT_VERSION + 1]) + data[1:])
    with pytest.raises(ValueError, match="another feature declaration"):
        state_cls.from_bytes(data[:1] + struct.pack("<I", 12345) + data[5:])
    with pytest.raises(ValueError, match="truncated"):
        state_cls.from_bytes(data[:-1])
    with pytest.raises(ValueError, match="too short"):
        state_cls.from_bytes(b"\x01")
    assert state_cls.from_bytes(state_cls.empty().to_bytes()).max_ts is None


def _format_1(state: CardState) -> bytes:
    """What format 1 wrote for the Python `state`: every primitive an int64, event by event."""
    h = state._head
    ts, amt, prims = state._ts[h:], state._amt[h:], state._prims[h * LAYOUT.width:]
    txn_ids, cols = state._txn[h:], [v[h:] for v in state._vals]
    strings = ["\x00".join(x).encode() for x in (txn_ids, *cols)]
    pairs = [x for q in state._maxq for entry in q for x in entry]
    n = len(ts)
    return b"".join((
        struct.pack("<BIqI", 1, LAYOUT.signature, state._max_ts if n else 0, n),
        struct.pack(f"<{len(state._maxq) + len(strings)}I", *map(len, state._maxq),
                    *map(len, strings)),
        ts.tobytes(), amt.tobytes(), prims.tobytes(), struct.pack(f"<{len(pairs)}q", *pairs),
        *strings))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(card_logs(max_size=60))
def test_a_format_1_state_is_read_and_written_again_as_format_2(log: tuple) -> None:
    """A store written before the primitives were packed by column (format 1) is read by both
    states; what they write back is the Python state's own format 2 bytes, and it goes on."""
    lateness, txns, _restarts, _compact_min = log
    py = CardState.empty()
    for t in txns[:-1]:
        py.apply(t, allowed_lateness_ms=lateness)
    old = _format_1(py)
    assert old[0] == 1
    for cls in {CardState, CompiledCardState or CardState}:
        restored = cls.from_bytes(old)
        assert restored.to_bytes() == py.to_bytes()
        assert len(restored.to_bytes()) <= len(old) + LAYOUT.width  # the widths: a byte each
        assert repr(restored.apply(txns[-1], allowed_lateness_ms=lateness)) == repr(
            CardState.from_bytes(py.to_bytes()).apply(txns[-1], allowed_lateness_ms=lateness))


def test_each_primitive_column_takes_the_narrowest_width_that_holds_it(
        state_cls: type[CardState]) -> None:
    """Amounts at each signed-width edge: the sum and max columns widen exactly past them."""
    header = struct.calcsize("<BIqI") + 4 * (len(LAYOUT.windows) + 1 + len(LAYOUT.distinct_fields))
    sum_1m, max_1m = 1, 2  # window 0's count, sum, max are primitives 0, 1, 2
    for amount, width in ((127, 1), (128, 2), (32_767, 2), (32_768, 4), (2**31 - 1, 4),
                          (2**31, 8), (10**12, 8)):
        state = state_cls.empty()
        state.apply(txn(1, BASE, amount), allowed_lateness_ms=L)
        data = state.to_bytes()
        widths = data[header:header + LAYOUT.width]
        assert (widths[sum_1m], widths[max_1m]) == (width, width), amount
        assert widths[0] == 1  # the count
        assert state_cls.from_bytes(data).to_bytes() == data
    state = state_cls.empty()
    state.apply(txn(1, BASE, 100), allowed_lateness_ms=L)
    data = bytearray(state.to_bytes())
    data[header] = 3
    with pytest.raises(ValueError, match="widths"):
        state_cls.from_bytes(bytes(data))


def test_apply_refuses_nul_in_ids_and_negative_lateness(state_cls: type[CardState]) -> None:
    with pytest.raises(ValueError, match="NUL"):
        state_cls.empty().apply(txn("x\x00y", BASE), allowed_lateness_ms=L)
    with pytest.raises(ValueError, match="allowed_lateness_ms"):
        state_cls.empty().apply(txn(1, BASE), allowed_lateness_ms=-1)


needs_compiled = pytest.mark.skipif(CompiledCardState is None, reason="app.features._state is not built")


@needs_compiled
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(card_logs(max_size=150))
def test_the_compiled_state_is_the_python_state_step_by_step(log: tuple) -> None:
    """Same outcome, bytes, length, max_ts and recall after every event; each restores the
    other's bytes mid-log and goes on identically. A third state, serialized only at the
    restarts and at the end, holds the compiled state's kept strings section (extended and cut
    between snapshots, stale after an out-of-order event) to the Python bytes too."""
    assert CompiledCardState is not None
    lateness, txns, restarts, compact_min = log
    py, c, lazy = CardState.empty(), CompiledCardState.empty(), CompiledCardState.empty()
    with compaction_after(compact_min):
        for i, (t, restart) in enumerate(zip(txns, restarts, strict=True)):
            assert_same(c.apply(t, allowed_lateness_ms=lateness),
                        py.apply(t, allowed_lateness_ms=lateness))
            lazy.apply(t, allowed_lateness_ms=lateness)
            data = py.to_bytes()
            assert c.to_bytes() == data
            assert (len(c), c.max_ts) == (len(py), py.max_ts)
            probe = txns[i // 2].txn_id
            assert repr(c.recall(probe)) == repr(py.recall(probe))
            if restart:  # swap: each goes on from the other's bytes
                assert lazy.to_bytes() == data
                py, c = CardState.from_bytes(c.to_bytes()), CompiledCardState.from_bytes(data)
                lazy = CompiledCardState.from_bytes(data)
        assert lazy.to_bytes() == py.to_bytes()
        assert c.to_bytes(b"pos") == py.to_bytes(b"pos") == b"pos" + py.to_bytes()


@needs_compiled
def test_the_compiled_state_keeps_any_utf8_and_refuses_what_python_refuses() -> None:
    assert CompiledCardState is not None
    log = [txn(f"é{i}", BASE + i * 1_000, 10 + i, merchant=f"café-{i % 3}", country="ÅL")
           for i in range(5)]
    py, c = CardState.empty(), CompiledCardState.empty()
    for t in log:
        assert_same(c.apply(t, allowed_lateness_ms=L), py.apply(t, allowed_lateness_ms=L))
    assert c.to_bytes() == py.to_bytes()
    assert CompiledCardState.from_bytes(py.to_bytes()).to_bytes() == py.to_bytes()
    bad = bytearray(py.to_bytes())
    bad[-1] = 0xFF  # not UTF-8
    for cls in (CardState, CompiledCardState):
        with pytest.raises(ValueError):
            cls.from_bytes(bytes(bad))
    # one NUL more in the last string column: the columns no longer match the event count
    extra = py.to_bytes()[:-1] + b"\x00"
    for cls in (CardState, CompiledCardState):
        with pytest.raises(ValueError, match="string columns|lengths"):
            cls.from_bytes(extra)


@needs_compiled
def test_the_compiled_state_is_never_tracked_by_the_collector() -> None:
    """It holds only str and int references: no cycles, so no collector work per card."""
    assert CompiledCardState is not None
    state = CompiledCardState.empty()
    state.apply(txn(1, BASE), allowed_lateness_ms=L)
    assert not gc.is_tracked(state)
    assert gc.is_tracked(CardState.empty())  # what the Python state costs the collector


_EXACT = 2**53
_prim = st.one_of(st.integers(-1000, 10**6), st.integers(-(2**63), 2**63 - 1),
                  st.sampled_from([0, 1, _EXACT - 1, _EXACT, _EXACT + 1, -_EXACT - 1]))


@needs_compiled
@settings(max_examples=3000, deadline=None)
@given(prims=st.lists(_prim, min_size=LAYOUT.width, max_size=LAYOUT.width),
       amount=st.one_of(st.integers(0, 10**7), _prim))
def test_the_compiled_derivation_is_vector_derive_bit_for_bit(prims: list[int],
                                                              amount: int) -> None:
    """Same values, same types, same floats to the bit; where Python raises (a zero count or
    mean) the compiled one raises the same."""
    from app.features import _state

    try:
        expected: object = derive(prims, amount)
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            _state.derive(prims, amount)
        return
    got = _state.derive(prims, amount)
    assert [type(v) for v in got] == [type(v) for v in expected]  # type: ignore[attr-defined]
    assert [struct.pack("<d", v) if isinstance(v, float) else v for v in got] == [
        struct.pack("<d", v) if isinstance(v, float) else v for v in expected]  # type: ignore[attr-defined]


def test_a_card_keeps_no_event_that_left_its_windows(state_cls: type[CardState]) -> None:
    """What an evicted event held (its txn_id, its field values, its slots) is freed while the
    card lives: a long-lived card whose events all aged out holds about what a new one does.
    (A compaction starts at the first evicted slot; it moves at most as many slots as it drops.)"""
    import tracemalloc

    gap = MAX_WINDOW_MS + L + 1  # each event evicts every earlier one

    def held(events: int, burst: int = 0) -> int:
        gc.collect()  # and the free lists: what is left is what the state holds
        tracemalloc.start()
        try:
            state = state_cls.empty()
            for i in range(burst):  # a busy spell, all in the windows at once
                state.apply(txn(f"b{i}", BASE - gap + i, merchant=f"bm{i}"),
                            allowed_lateness_ms=L)
            for i in range(events):  # fresh strings, as decoded from Kafka
                state.apply(txn(f"x{i}", BASE + i * gap, merchant=f"m{i}", country=f"C{i}"),
                            allowed_lateness_ms=L)
            assert len(state) == 1
            gc.collect()
            return tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    assert held(60) - held(2) < 1_000
    if state_cls is CompiledCardState:  # what the stream folds with gives a busy spell's
        assert held(2, burst=200) - held(2) < 1_000  # buffers and count tables back
