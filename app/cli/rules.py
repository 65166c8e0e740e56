"""`fraudstream rules add | edit | disable | show | history` and `fraudstream reviews list |
close`: the rules and the review queue, through the action service."""

from __future__ import annotations

import json
import urllib.parse
import uuid
from typing import Any

import click

from app.cli.lists import _call
from app.rules.rule import RULE_ACTIONS, RULE_MODES


def _rule_path(rule_id: str) -> str:
    return f"/v1/rules/{urllib.parse.quote(rule_id, safe='')}"


def _line(r: dict[str, Any]) -> str:
    return (f"{r['id']}@{r['version']}  {r['mode']:<8}  {r['action']:<14}  order {r['order']:<6}"
            f"  {r['expression']}  (owner {r['owner']}; {r['reason']}; by {r['author']})")


@click.group("rules")
def rules() -> None:
    """The fraud team's rules: written once, versioned, applied by every worker without a
    restart (docs/rules.md)."""


@rules.command("add")
@click.argument("rule_id")
@click.argument("expression")
@click.option("--action", type=click.Choice(RULE_ACTIONS), required=True,
              help="What a transaction the rule holds for gets.")
@click.option("--owner", required=True, help="Who answers for the rule.")
@click.option("--reason", required=True, help="Why it exists.")
@click.option("--mode", type=click.Choice(RULE_MODES), default="active", show_default=True,
              help="log_only counts its hits and acts on nothing.")
@click.option("--order", type=int, default=None,
              help="Where it sits (lower first; default: after the last rule).")
def add(rule_id: str, expression: str, action: str, owner: str, reason: str, mode: str,
        order: int | None) -> None:
    """Write a new rule (version 1)."""
    body: dict[str, Any] = {"id": rule_id, "expression": expression, "action": action,
                            "owner": owner, "reason": reason, "mode": mode}
    if order is not None:
        body["order"] = order
    click.echo(_line(_call("POST", "/v1/rules", body)))


@rules.command("edit")
@click.argument("rule_id")
@click.option("--expression", default=None)
@click.option("--action", type=click.Choice(RULE_ACTIONS), default=None)
@click.option("--owner", default=None)
@click.option("--reason", default=None)
@click.option("--mode", type=click.Choice(RULE_MODES), default=None)
@click.option("--order", type=int, default=None)
def edit(rule_id: str, **changes: Any) -> None:
    """Write a rule's next version with the given fields changed."""
    body = {k: v for k, v in changes.items() if v is not None}
    if not body:
        raise click.UsageError("nothing to change: give at least one option")
    click.echo(_line(_call("PATCH", _rule_path(rule_id), body)))


@rules.command("disable")
@click.argument("rule_id")
@click.option("--reason", required=True, help="Why it is turned off.")
def disable(rule_id: str, reason: str) -> None:
    """Turn a rule off (a new version in mode disabled; its history stays)."""
    click.echo(_line(_call("PATCH", _rule_path(rule_id), {"mode": "disabled",
                                                          "reason": reason})))


@rules.command("show")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON rule a line (the file `backtest --rules` reads).")
def show(as_json: bool) -> None:
    """Every rule's current version, in evaluation order."""
    found = _call("GET", "/v1/rules")["rules"]
    for r in found:
        click.echo(json.dumps(r, separators=(",", ":")) if as_json else _line(r))
    if not as_json:
        click.echo(f"{len(found)} rules", err=True)


@rules.command("history")
@click.argument("rule_id")
def history(rule_id: str) -> None:
    """Every version of one rule, oldest first, with its author and time."""
    for r in _call("GET", _rule_path(rule_id))["history"]:
        click.echo(f"{_line(r)}  at {r['at_ms']}")


@click.group("reviews")
def reviews() -> None:
    """The review queue: transactions rules sent to review."""


@reviews.command("list")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def list_reviews(limit: int, as_json: bool) -> None:
    """The open reviews, oldest first."""
    answer = _call("GET", f"/v1/reviews?status=open&limit={limit}")
    for r in answer["reviews"]:
        click.echo(json.dumps(r, separators=(",", ":")) if as_json else
                   f"{r['id']}  card {r['card_id']}  txn {r['txn_id']}  score {r['score']:.4f}"
                   f"  {r['rule'] or r['decided_by']}")
    click.echo(f"{answer['open']} open", err=True)


@reviews.command("close")
@click.argument("review_id")
@click.argument("outcome", type=click.Choice(["fraud", "legitimate"]))
@click.option("--reason", default="", help="Why.")
@click.option("--key", default=None, help="Idempotency-Key (default: a new UUID).")
def close(review_id: str, outcome: str, reason: str, key: str | None) -> None:
    """Close a review: its label is written and the card follows (fraud: frozen)."""
    from app.cli.lists import _request

    answer = _request("POST", f"/v1/reviews/{urllib.parse.quote(review_id, safe='')}/close",
                      {"outcome": outcome, "reason": reason},
                      {"Idempotency-Key": key or str(uuid.uuid4())})
    click.echo(f"{answer['review_id']}: {answer['outcome']}, card {answer['card']}")

