"""Generated logs: determinism, line accounting, labels, contract validity and delivery order."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import orjson
import pytest

from app.datagen.catalog import COUNTRIES
from app.datagen.config import DAY_MS, GeneratorConfig
from app.datagen.delivery import BEYOND_LATENESS_SHARE, REDELIVERY_GAP_LINES
from app.datagen.generator import CHARGEBACK_DELAY_MS, LEGIT_LABEL_DELAY_MS, generate_log
from app.datagen.log import GeneratedLog
from app.datagen.malformed import LINE_BREAK_BYTES
from app.transactions.contract import ContractError, parse_transaction

NOISY = GeneratorConfig(cards=300, txns=8_000, seed=5, out_of_order=0.05, redelivery=0.03,
                        malformed=0.03)
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


@pytest.fixture(scope="module")
def noisy() -> GeneratedLog:
    return generate_log(NOISY)


def _file(log: GeneratedLog) -> bytes:
    return b"".join(log.jsonl_chunks(chunk_lines=1000))


def _labels(log: GeneratedLog) -> bytes:
    return b"".join(log.label_chunks(chunk_lines=1000))


def test_same_config_gives_identical_bytes(noisy: GeneratedLog) -> None:
    again = generate_log(NOISY)
    assert _file(again) == _file(noisy)
    assert _labels(again) == _labels(noisy)


def test_different_seed_gives_different_bytes(noisy: GeneratedLog) -> None:
    other = generate_log(GeneratorConfig(**{**_kwargs(NOISY), "seed": 6}))
    assert _file(other) != _file(noisy)
    assert other.tag != noisy.tag  # and different txn_ids: the logs can share a topic


def test_chunking_does_not_change_the_bytes(noisy: GeneratedLog) -> None:
    assert b"".join(noisy.jsonl_chunks()) == _file(noisy)
    assert [line for line, _ in noisy.iter_lines(chunk_lines=777)] == _file(noisy).split(
        b"\n")[:-1]


def test_delivery_options_leave_the_transactions_unchanged(noisy: GeneratedLog) -> None:
    clean = generate_log(GeneratorConfig(**{**_kwargs(NOISY), "out_of_order": 0.0,
                                            "redelivery": 0.0, "malformed": 0.0}))
    clean_lines = [line for line, _ in clean.iter_lines()]
    noisy_valid = [line for line, kind in noisy.iter_lines() if kind == "valid"]
    assert sorted(noisy_valid) == sorted(clean_lines)
    assert _labels(clean) != b"" and set(_labels(clean).split()) == set(_labels(noisy).split())


def test_lines_add_up(noisy: GeneratedLog) -> None:
    counts = noisy.counts
    kinds = [kind for _, kind in noisy.iter_lines()]
    assert counts.transactions == kinds.count("valid") == NOISY.txns
    assert counts.redelivered == kinds.count("redelivery") == round(NOISY.redelivery * NOISY.txns)
    assert counts.malformed == kinds.count("malformed") == round(NOISY.malformed * NOISY.txns)
    assert counts.lines == len(kinds) == counts.transactions + counts.redelivered + counts.malformed
    assert sum(counts.malformed_by_kind.values()) == counts.malformed
    assert counts.displaced == round(NOISY.out_of_order * NOISY.txns)


def test_redelivered_lines_repeat_an_earlier_line_shortly_after(noisy: GeneratedLog) -> None:
    first_at: dict[bytes, int] = {}
    for i, (line, kind) in enumerate(noisy.iter_lines()):
        if kind == "valid":
            assert line not in first_at  # valid lines are distinct
            first_at[line] = i
        elif kind == "redelivery":
            assert line in first_at, "a redelivery must follow its original"
            # the gap counts the original's lines; bad messages in between add to it
            assert 0 < i - first_at[line] <= 2 * REDELIVERY_GAP_LINES[1]


def test_every_line_is_valid_or_rejected_as_its_bad_message_says(noisy: GeneratedLog) -> None:
    now = NOISY.validation_now_ms
    bad = iter(noisy.bad_messages)
    ids = set()
    for line, kind in noisy.iter_lines():
        if kind == "malformed":
            expected = next(bad)
            assert line == expected.raw and not LINE_BREAK_BYTES.intersection(line)
            with pytest.raises(ContractError) as info:
                parse_transaction(line, now_ms=now, max_bytes=NOISY.max_message_bytes)
            assert (info.value.rejection.code, info.value.rejection.field) == (
                expected.code, expected.field), expected.kind
            continue
        txn = parse_transaction(line, now_ms=now)
        assert all(_ID.fullmatch(x) for x in (txn.txn_id, txn.card_id, txn.merchant_id))
        assert NOISY.start_ms <= txn.ts_ms < NOISY.end_ms
        if kind == "valid":
            ids.add(txn.txn_id)
    assert len(ids) == NOISY.txns
    assert next(bad, None) is None  # bad messages appear in file order


def test_labels_cover_each_transaction_once_in_file_order(noisy: GeneratedLog) -> None:
    first_order = []
    ts_of = {}
    for line, kind in noisy.iter_lines():
        if kind == "valid":
            obj = orjson.loads(line)
            first_order.append(obj["txn_id"])
            ts_of[obj["txn_id"]] = obj["ts_ms"]
    labels = [orjson.loads(line) for line in _labels(noisy).split(b"\n")[:-1]]
    assert [lab["txn_id"] for lab in labels] == first_order
    assert all(set(lab) == {"txn_id", "label", "label_ts_ms", "merchant_id", "ts_ms"}
               for lab in labels)
    assert all(lab["ts_ms"] == ts_of[lab["txn_id"]] for lab in labels)
    fraud = [lab for lab in labels if lab["label"] == 1]
    assert len(fraud) == noisy.counts.fraud and {lab["label"] for lab in labels} == {0, 1}
    for lab in labels:
        delay = lab["label_ts_ms"] - ts_of[lab["txn_id"]]
        if lab["label"]:
            assert CHARGEBACK_DELAY_MS[0] <= delay <= CHARGEBACK_DELAY_MS[1]
        else:
            assert delay == LEGIT_LABEL_DELAY_MS
    assert [lab.txn_id for lab in noisy.labels()] == first_order


def test_file_order_is_event_time_order_except_displaced(noisy: GeneratedLog) -> None:
    d = noisy.delivery
    in_place = d.row[(d.kind == 0) & ~d.displaced[d.row]]
    assert np.all(np.diff(noisy.txns.ts[in_place]) >= 0)
    everything = d.row[d.kind == 0]
    assert np.any(np.diff(noisy.txns.ts[everything]) < 0)


def test_late_events_follow_the_per_card_rule(noisy: GeneratedLog) -> None:
    lateness = NOISY.allowed_lateness_ms
    max_ts: dict[int, int] = {}
    late = set()
    for row in noisy.label_rows().tolist():  # first occurrences in file order
        card, ts = int(noisy.txns.card[row]), int(noisy.txns.ts[row])
        if card in max_ts and ts < max_ts[card] - lateness:
            late.add(row)
        max_ts[card] = max(ts, max_ts.get(card, ts))
    assert late == set(np.flatnonzero(noisy.delivery.late).tolist())
    assert late <= set(np.flatnonzero(noisy.delivery.displaced).tolist()) | _displaced_cards(
        noisy, late)
    share = len(late) / noisy.counts.displaced
    assert BEYOND_LATENESS_SHARE * 0.6 <= share <= BEYOND_LATENESS_SHARE * 1.6


def _displaced_cards(log: GeneratedLog, rows: set[int]) -> set[int]:
    """Rows made late only because another event of their card was displaced."""
    displaced_cards = set(log.txns.card[log.delivery.displaced].tolist())
    return {r for r in rows if int(log.txns.card[r]) in displaced_cards}


def test_without_displacement_nothing_is_late() -> None:
    log = generate_log(GeneratorConfig(cards=100, txns=3_000, seed=2, redelivery=0.02))
    assert log.counts.late == 0 and log.counts.displaced == 0
    rows = log.label_rows()
    assert np.array_equal(rows, np.arange(len(rows)))


def test_fraud_rate_is_close_to_the_target() -> None:
    log = generate_log(GeneratorConfig(cards=500, txns=20_000, seed=9, fraud_rate=0.02))
    fraud = log.counts.fraud
    assert 400 <= fraud <= 400 + 10  # whole incidents overshoot by a few at most
    assert all(n > 0 for n in log.counts.fraud_by_pattern.values())
    none = generate_log(GeneratorConfig(cards=50, txns=1_000, seed=9, fraud_rate=0.0))
    assert none.counts.fraud == 0


def test_too_few_transactions_for_whole_incidents_is_an_error() -> None:
    with pytest.raises(ValueError, match="raise txns or lower fraud_rate"):
        generate_log(GeneratorConfig(cards=10, txns=4, seed=0, fraud_rate=0.5))


def test_realistic_structure() -> None:
    log = generate_log(GeneratorConfig(cards=400, txns=20_000, seed=4, fraud_rate=0.0))
    t = log.txns
    per_card = np.bincount(t.card, minlength=400)
    assert per_card.max() > 8 * np.median(per_card)  # heavy-tailed activity
    offset_h = np.array([c.utc_offset_h for c in COUNTRIES])[t.country]
    local_hour = (t.ts // 3_600_000 + offset_h) % 24
    assert np.isin(local_hour, range(1, 5)).mean() < 0.05  # a uniform clock would give 0.17
    atm = t.channel == 2
    assert atm.any() and np.all(t.mcc[atm] == 6011) and np.all(t.amount[atm] % 1000 == 0)
    grocery, airline = t.amount[t.mcc == 5411], t.amount[t.mcc == 4511]
    assert np.median(airline) > 5 * np.median(grocery)
    lines = [orjson.loads(line) for line, _ in log.iter_lines()]
    pairs = {(o["country"], o["currency"]) for o in lines}
    assert ("JP", "JPY") in pairs and ("DE", "EUR") in pairs and ("US", "USD") in pairs
    assert len({c for c, _ in pairs}) == len(pairs)  # one currency per country


def _kwargs(config: GeneratorConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_start_is_respected() -> None:
    start = 1_700_000_123_456
    log = generate_log(GeneratorConfig(cards=20, txns=500, seed=1, start_ms=start, days=2))
    assert start <= log.txns.ts.min() and log.txns.ts.max() < start + 2 * DAY_MS
    by_card = defaultdict(list)
    for row in range(len(log.txns)):
        by_card[int(log.txns.card[row])].append(row)
    assert len(by_card) > 10
