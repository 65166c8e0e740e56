"""The demo's summary: short lines, counts that add up, the frozen cards counted not listed."""

from __future__ import annotations

from collections import Counter

from app.cli.kept import KeptRun
from app.cli.summary import FROZEN_ROWS, WIDTH, summarise

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


def test_look_around_names_urls_token_and_next_commands() -> None:
    run = KeptRun(workdir="/s/demo/demo-1", topic_prefix=P, app_id="fraudstream-demo-1",
                  service_url="http://127.0.0.1:1", worker_url="http://127.0.0.1:2",
                  pids={"action service": 11, "worker": 12})
    lines = run.look_around("tok", "c0000001")
    text = "\n".join(lines)
    assert "http://127.0.0.1:1" in text and "token: tok" in text and "/metrics" in text
    assert "fraudstream watch --demo" in text and "fraudstream demo --stop" in text
    assert "Bearer tok' http://127.0.0.1:1/v1/cards/c0000001" in text
    assert len(lines) <= 10


def test_each_listed_freeze_shows_why_in_one_line() -> None:
    frozen = _frozen(5)
    for view in frozen:
        view["explanation"] = [
            {"name": "sum_24h", "value": 1_234_567, "contribution": 0.4123},
            {"name": "amount_to_mean_24h", "value": 7.25, "contribution": 0.2},
            {"name": "count_1h", "value": 9, "contribution": -0.05},
            {"name": "distinct_countries_24h", "value": 3, "contribution": 0.01},
            {"name": "ms_since_prev", "value": 120_000, "contribution": 0.001}]
    s = summarise(P, _sizes(10, 10, 0, 0), Counter(), ACTIONS, frozen, "f.jsonl")
    why = [line for line in s.lines if line.strip().startswith("why ")]
    assert len(why) == FROZEN_ROWS and all(len(line) <= WIDTH for line in s.lines)
    # the top features first, value and contribution, the rest counted
    assert why[0] == ("  why        sum_24h=1.23M +0.41, amount_to_mean_24h=7.25 +0.20, "
                      "+3 more"), why[0]
