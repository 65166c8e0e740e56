"""The demo's summary: short lines, counts that add up, the frozen cards counted not listed,
money in currency units."""

from __future__ import annotations

from collections import Counter

from app.cli.summary import FROZEN_ROWS, WIDTH, currencies_of, summarise

P = "demo-1."


def _sizes(source: int, served: int, late: int, dlq: int, actions: int = 9) -> dict[str, int]:
    return {f"{P}transactions": source, f"{P}features.served": served,
            f"{P}transactions.late": late, f"{P}transactions.dlq": dlq, f"{P}actions": actions,
            f"{P}actions.dlq": 0}


def _frozen(n: int, status: str = "frozen") -> list[dict[str, object]]:
    return [{"card_id": f"c{i:07d}", "status": status, "txn_id": f"t-{i}", "alerts_total": i}
            for i in range(n)]


REASONS = Counter({f"reason_number_{i}": 100 - i for i in range(12)})
ACTIONS = ([(f"f{i}", "freeze_card") for i in range(6)] + [("a1", "alert_customer")]
           + [("f0", "freeze_card"), ("f1", "freeze_card")])


def test_a_balanced_run_in_few_short_lines() -> None:
    s = summarise(P, _sizes(1000, 900, 40, 60), REASONS, ACTIONS, _frozen(40), "frozen.jsonl")
    assert s.balanced
    text = "\n".join(s.lines + s.verdict)
    assert all(len(line) <= WIDTH for line in s.lines + s.verdict), text
    assert len(s.lines) + len(s.verdict) <= 14, text
    # frozen cards: a count and the first few, never the whole list
    assert sum("frozen by" in line for line in s.lines) == FROZEN_ROWS
    assert f"{FROZEN_ROWS} of 40 in frozen.jsonl" in text
    assert "6 freeze_card, 1 alert_customer; 2 re-sent copies absorbed" in text
    assert "(6 freeze decisions" not in text  # 6 decisions for 40 cards: nothing to explain
    # every reason is shown or counted
    reasons = next(line for line in s.lines if line.startswith("dlq reasons"))
    listed = reasons.count("reason_number_")
    assert 0 < listed < 12 and reasons.endswith(f"+{12 - listed} more"), reasons
    assert "1,000 in = 900 served + 40 late + 60 dead-lettered ✓" in s.verdict[0]


def test_more_freeze_decisions_than_cards_is_explained() -> None:
    s = summarise(P, _sizes(10, 10, 0, 0), Counter(), ACTIONS, _frozen(2), "f.jsonl")
    text = "\n".join(s.lines)
    assert "2 cards (6 freeze decisions" in text and "find it frozen already" in text
    assert "all 2 in f.jsonl" in text
    assert "dlq reasons  none" in text


def test_unbalanced_or_unfrozen_is_not_balanced() -> None:
    lost = summarise(P, _sizes(100, 90, 0, 5), Counter(), [], [], "f.jsonl")
    assert not lost.balanced and lost.verdict[0].endswith("✗")
    thawed = summarise(P, _sizes(10, 10, 0, 0), Counter(), ACTIONS, _frozen(2, "active"), "f")
    assert not thawed.balanced and thawed.verdict[1].endswith("✗")


def _explained(n: int) -> list[dict[str, object]]:
    frozen = _frozen(n)
    for view in frozen:
        view["explanation"] = [
            {"name": "sum_24h", "value": 1_234_567, "contribution": 0.4123},
            {"name": "amount_to_mean_24h", "value": 7.25, "contribution": 0.2},
            {"name": "count_1h", "value": 9, "contribution": -0.05},
            {"name": "distinct_countries_24h", "value": 3, "contribution": 0.01},
            {"name": "ms_since_prev", "value": 120_000, "contribution": 0.001}]
    return frozen


def test_each_listed_freeze_shows_why_in_one_line() -> None:
    currencies = {"t-0": "EUR", "t-1": "JPY", "t-2": "KWD"}
    s = summarise(P, _sizes(10, 10, 0, 0), Counter(), ACTIONS, _explained(5), "f.jsonl",
                  currencies)
    why = [line for line in s.lines if line.strip().startswith("why ")]
    assert len(why) == FROZEN_ROWS and all(len(line) <= WIDTH for line in s.lines)
    # the top features first, value and contribution, the rest counted; money (sum_24h, in
    # minor units) in the freezing transaction's currency, whatever its decimals
    assert why[0] == ("  why        sum_24h=12.3k EUR +0.41, amount_to_mean_24h=7.25 +0.20, "
                      "+3 more"), why[0]
    assert why[1].startswith("  why        sum_24h=1.23M JPY +0.41,"), why[1]
    assert why[2].startswith("  why        sum_24h=1.23k KWD +0.41,"), why[2]


def _why(explanation: list[dict[str, object]], currencies: dict[str, str] | None) -> str:
    frozen = _frozen(1)
    frozen[0]["explanation"] = explanation
    lines = summarise(P, _sizes(1, 1, 0, 0), Counter(), ACTIONS, frozen, "f", currencies).lines
    return next(line for line in lines if line.strip().startswith("why "))


def test_money_below_a_thousand_keeps_its_cents_and_k_is_a_thousand() -> None:
    explanation: list[dict[str, object]] = [
        {"name": "sum_1h", "value": 64_172, "contribution": 0.5},
        {"name": "count_24h", "value": 64_172, "contribution": 0.1}]
    line = _why(explanation, {"t-0": "USD"})
    assert "sum_1h=641.72 USD +0.50" in line  # 64,172 cents, not 6.42k
    assert "count_24h=64.2k +0.10" in line  # not money: k is a thousand, never ten thousand
    assert "max_5m=8.99 USD" in _why([{"name": "max_5m", "value": 899, "contribution": 0.1}],
                                     {"t-0": "USD"})
    # a transaction whose currency is unknown: said to be minor units, not passed off as units
    assert "sum_1h=64.2k minor units" in _why(explanation, None)


def test_currencies_are_read_from_the_log_lines() -> None:
    lines = [b'{"txn_id": "t-0", "currency": "EUR"}', b"not json", b'{"txn_id": ["x"]}',
             b'{"txn_id": "t-9", "currency": "USD"}', b"[1, 2]"]
    assert currencies_of(lines, {"t-0", "t-1"}) == {"t-0": "EUR"}
