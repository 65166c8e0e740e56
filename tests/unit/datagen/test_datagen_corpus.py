"""The bad-message corpus: named, deterministic, single-line, and relative to its context."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from app.datagen.malformed import (
    KINDS,
    KINDS_BY_NAME,
    LINE_BREAK_BYTES,
    BadMessageKind,
    CorpusContext,
    build_bad_message,
    sample_base,
)
from app.transactions.contract import ContractError, parse_transaction

NOW_MS = 1_767_225_600_000


def test_kinds_are_many_and_uniquely_named() -> None:
    assert len(KINDS) >= 22
    assert len(KINDS_BY_NAME) == len(KINDS)
    required = {"invalid_utf8", "not_json", "truncated_json", "json_array", "json_string",
                "json_number", "empty_message", "unknown_field", "null_amount", "string_amount",
                "float_amount", "integral_float_amount", "nan_amount", "infinity_amount",
                "negative_amount", "zero_amount", "huge_amount", "boolean_amount",
                "lowercase_currency", "four_letter_currency", "bad_country", "bad_channel",
                "txn_id_too_long", "txn_id_with_space", "merchant_id_with_slash",
                "card_id_with_emoji", "empty_txn_id", "far_future_ts", "pre_2000_ts",
                "float_ts", "mcc_out_of_range", "oversized_padding", "oversized_unknown_field"}
    assert required <= set(KINDS_BY_NAME)
    assert sum(k.code == "missing_field" for k in KINDS) >= 3


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_bytes_are_deterministic_per_rng_and_never_hold_a_line_break(
    kind: BadMessageKind,
) -> None:
    ctx = CorpusContext(now_ms=NOW_MS)
    base = sample_base("t-9", now_ms=NOW_MS)
    for seed in range(20):
        a = build_bad_message(kind, base, np.random.default_rng(seed), ctx)
        b = build_bad_message(kind, base, np.random.default_rng(seed), ctx)
        assert a == b
        assert not LINE_BREAK_BYTES.intersection(a.raw)
        assert a.raw.count(b"\n") == 0


def test_far_future_is_relative_to_the_context_clock() -> None:
    base = sample_base("t-1", now_ms=NOW_MS)
    later = NOW_MS + 10 * 86_400_000
    bad = build_bad_message("far_future_ts", base, np.random.default_rng(0),
                            CorpusContext(now_ms=later))
    with pytest.raises(ContractError):
        parse_transaction(bad.raw, now_ms=later)
    # three days later the same event time is no longer in the future
    assert parse_transaction(bad.raw, now_ms=later + 3 * 86_400_000).ts_ms > later


def test_oversized_kinds_follow_the_size_limit_in_the_context() -> None:
    base = sample_base("t-1", now_ms=NOW_MS)
    for name in ("oversized_padding", "oversized_unknown_field"):
        bad = build_bad_message(name, base, np.random.default_rng(1),
                                CorpusContext(now_ms=NOW_MS, max_bytes=20_000))
        assert 20_000 < len(bad.raw) < 21_000
        with pytest.raises(ContractError) as info:
            parse_transaction(bad.raw, now_ms=NOW_MS, max_bytes=20_000)
        assert info.value.rejection.code == "too_large"


def test_sample_base_is_valid() -> None:
    raw = orjson.dumps(sample_base("t-1", now_ms=NOW_MS))
    assert parse_transaction(raw, now_ms=NOW_MS).txn_id == "t-1"
