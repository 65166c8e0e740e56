"""`fraudstream backtest`: a log through the same features, model, lists and policy offline,
the active policy beside a candidate, measured against labels."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import orjson

from app.cli.errors import require_parent_dir
from app.cli.options import (
    INPUT_FILE,
    OUTPUT_FILE,
    labels_option,
    log_options,
    model_dir_option,
    model_option,
)

#: Changed actions printed (all of them go to --diff-out).
SHOWN_CHANGES = 20


def _read_labels(path: Path, now_ms: int) -> list[Any]:
    """Every row of a label file, checked as `fraudstream labels` checks it; the first bad row
    is one line naming the row and the field (a backtest on part of the labels would mislead)."""
    from app.transactions.labelfile import iter_label_rows
    from app.transactions.labels import LabelError, parse_label_row
    from app.transactions.logfile import LogFileError

    records = []
    try:
        for number, _raw, row in iter_label_rows(path):
            try:
                if isinstance(row, LabelError):
                    raise row
                records.append(parse_label_row(row, now_ms=now_ms))
            except LabelError as exc:
                raise click.ClickException(f"{path}: line {number}: {exc.reason} "
                                           "(nothing computed)") from None
    except LogFileError as exc:
        raise click.ClickException(str(exc)) from None
    return records


def _read_lists(path: Path | None) -> Any:  # noqa: ANN401 - app.scoring.lists.Lists
    from app.scoring.lists import EMPTY, ListEntryError, read_lists_file

    if path is None:
        return EMPTY
    try:
        return read_lists_file(path.read_bytes().splitlines())
    except ListEntryError as exc:
        field = f" (field: {exc.field})" if exc.field else ""
        raise click.ClickException(f"{path}: {exc.reason}{field}") from None


def _read_rules(path: Path | None) -> Any:  # noqa: ANN401 - app.rules.ruleset.RuleSet
    from app.rules.rule import RuleError, read_rules_file
    from app.rules.ruleset import EMPTY, RuleSet

    if path is None:
        return EMPTY
    try:
        return RuleSet.of(read_rules_file(path.read_bytes().splitlines()))
    except RuleError as exc:
        raise click.ClickException(f"{path}: {exc}") from None


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _row(label: str, active: object, candidate: object | None, delta: str = "") -> str:
    if candidate is None:
        return f"  {label:<22}{active!s:>26}"
    return f"  {label:<22}{active!s:>26}{candidate!s:>26}{delta:>12}"


def _delta(a: int, b: int) -> str:
    return f"{b - a:+,}"


def render(comparison: Any, *, shown: int = SHOWN_CHANGES) -> list[str]:  # noqa: ANN401
    """The report's lines: totals side by side, per day, and the actions that change."""
    active, cand = comparison.active, comparison.candidate
    lines = [_row("", "active", cand and "candidate", cand and "change"),
             _row("freeze if score >=", f"{active.thresholds.freeze:.6g}",
                  cand and f"{cand.thresholds.freeze:.6g}"),
             _row("alert if score >=", f"{active.thresholds.alert:.6g}",
                  cand and f"{cand.thresholds.alert:.6g}")]
    t, c = active.total, cand.total if cand else None
    for label, get in (("freezes", lambda x: x.freezes), ("alerts (no freeze)", lambda x: x.alerts),
                       ("reviews", lambda x: x.reviews),
                       ("fraud amount caught", lambda x: x.fraud_amount_caught)):
        lines.append(_row(label, f"{get(t):,}", c and f"{get(c):,}",
                          _delta(get(t), get(c)) if c else ""))
    lines.append(_row("precision of freezes", _ratio(t.precision), c and _ratio(c.precision)))
    lines.append(_row("recall of fraud", _ratio(t.recall), c and _ratio(c.recall)))
    lines.append(_row("cards frozen", f"{active.cards_frozen:,}",
                      cand and f"{cand.cards_frozen:,}",
                      _delta(active.cards_frozen, cand.cards_frozen) if cand else ""))
    lines.append(_row("cards frozen wrongly", f"{active.cards_frozen_wrongly:,}",
                      cand and f"{cand.cards_frozen_wrongly:,}",
                      _delta(active.cards_frozen_wrongly, cand.cards_frozen_wrongly)
                      if cand else ""))
    lines.append(f"  fraud: {t.fraud:,} transactions, {t.fraud_amount:,} in minor units")
    lines.append("per day (UTC): freezes · alerts · precision · recall" +
                 (" (active → candidate)" if cand else ""))
    days = sorted(set(active.days) | set(cand.days if cand else ()))
    for day in days:
        a = active.days.get(day)
        b = cand.days.get(day) if cand else None
        cells = []
        for get in (lambda x: f"{x.freezes:,}", lambda x: f"{x.alerts:,}",
                    lambda x: _ratio(x.precision), lambda x: _ratio(x.recall)):
            left = get(a) if a else "0"
            cells.append(left if cand is None else f"{left} → {get(b) if b else '0'}")
        lines.append(f"  {day}  " + " · ".join(cells))
    if cand is not None:
        changes = comparison.changes
        removed = sum(1 for ch in changes if ch.kind == "removed")
        lines.append(f"actions that change: {len(changes):,} ({removed:,} only in active, "
                     f"{len(changes) - removed:,} only in candidate)")
        for ch in changes[:shown]:
            a = ch.action
            lines.append(f"  {'-' if ch.kind == 'removed' else '+'} {a.type:<14} {a.card_id:<12} "
                         f"{a.txn_id:<24} score {a.score:.4f}"
                         f"{'  fraud' if ch.fraud else ''}")
        if len(changes) > shown:
            lines.append(f"  … {len(changes) - shown:,} more (--diff-out FILE lists all)")
    return lines


@click.command("backtest", context_settings={"max_content_width": 120})
@log_options()
@labels_option("Labels (.jsonl or .parquet, as `fraudstream labels` reads them).",
               required=True, dest="labels_path")
@click.option("--policy", "policy_path", type=INPUT_FILE, default=None,
              help='Candidate policy: JSON {"freeze": F, "alert": A} (either may be left out: '
              "the active one's). Without it, only the active policy is measured.")
@model_option()
@model_dir_option()
@click.option("--lists", "lists_path", type=INPUT_FILE, default=None,
              help="Allow/block lists applied to both policies: JSONL of entries, as "
              "`fraudstream lists show --json` prints them [default: none].")
@click.option("--active-rules", "active_rules_path", type=INPUT_FILE, default=None,
              help="The rules in force (JSONL, as `fraudstream rules show --json` prints "
              "them) [default: none].")
@click.option("--rules", "rules_path", type=INPUT_FILE, default=None,
              help="Candidate rules, in place of the active ones for the candidate (JSONL: "
              "rules as `rules show --json` prints them, or {id, expression, action[, mode, "
              "order]}); prints each rule's hits, precision, recall, fraud amount caught, cards "
              "frozen wrongly and overlaps.")
@click.option("--out-actions", type=OUTPUT_FILE, default=None,
              help="Write the active policy's actions (JSONL, as the pipeline emits them).")
@click.option("--diff-out", type=OUTPUT_FILE, default=None,
              help="Write every action that changes (JSONL: change, fraud, the action).")
def backtest(events: Path, labels_path: Path, policy_path: Path | None, version: str | None,
             model_dir: Path, lists_path: Path | None, active_rules_path: Path | None,
             rules_path: Path | None, out_actions: Path | None, diff_out: Path | None,
             lateness_ms: int | None, now_ms: int | None) -> None:
    """Run a log through the pipeline's features, model, lists and policy offline and print,
    the active policy (the model card's thresholds with FRAUDSTREAM_FREEZE_THRESHOLD /
    FRAUDSTREAM_ALERT_THRESHOLD applied, as the worker does) beside the candidate: freezes and
    alerts per day, precision and recall, fraud amount caught, cards frozen wrongly and the
    actions that change. Features and scores are computed once for both."""
    from app.cli.features import progress_bar
    from app.cli.score import _write_jsonl
    from app.scoring.backtest import Rows, Truth, compare, evaluate, parse_policy
    from app.scoring.contract import ModelError
    from app.scoring.oracle import decide_rows, score_table
    from app.scoring.registry import ModelRegistry
    from app.settings import load_settings

    for path, option in ((out_actions, "--out-actions"), (diff_out, "--diff-out")):
        require_parent_dir(path, option)
    if events.suffix not in (".parquet", ".jsonl", ".ndjson", ".json"):
        raise click.BadParameter(f"{events}: unknown log format {events.suffix!r}",
                                 param_hint="--events")
    settings = load_settings()
    clock = int(time.time() * 1000) if now_ms is None else now_ms
    registry = ModelRegistry(model_dir, device="cpu")
    try:
        loaded = registry.load(version)
        active = loaded.thresholds.override(freeze=settings.freeze_threshold,
                                            alert=settings.alert_threshold)
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None
    candidate = None
    if policy_path is not None:
        try:
            candidate = parse_policy(policy_path.read_bytes(), active)
        except ValueError as exc:
            raise click.ClickException(f"{policy_path}: {exc}") from None
    lists = _read_lists(lists_path)
    active_rules, candidate_rules = _read_rules(active_rules_path), _read_rules(rules_path)
    if rules_path is not None and candidate is None:
        candidate = active
    # labels are checked against the wall clock (the log's validator clock may lie before
    # the labels came in: chargebacks arrive weeks later)
    records = _read_labels(labels_path, max(clock, int(time.time() * 1000)))
    truth = Truth.of(records)
    began = time.perf_counter()
    from app.features.merchant import MerchantTable
    from app.features.offline import compute_features

    with progress_bar(events) as progress:
        offline = compute_features(
            events, progress=progress, now_ms=clock, max_bytes=settings.max_message_bytes,
            allowed_lateness_ms=settings.allowed_lateness_ms if lateness_ms is None
            else lateness_ms, extra=_extra(active_rules, candidate_rules),
            merchants=MerchantTable.of(records))  # known before each day: no look-ahead
    if offline.accepted == 0:
        raise click.ClickException(f"no valid transaction in {events} ({offline.summary()}): "
                                   "nothing to backtest; is it a transaction log?")
    scores = score_table(loaded, offline)
    table = offline.table
    rows = Rows(*(table.column(n).to_pylist()
                  for n in ("txn_id", "card_id", "ts_ms", "amount_minor")), scores.tolist())
    fraud_rows = rows.fraud_rows(truth)
    outcomes = []
    for name, policy, rule_set in (("active", active, active_rules),
                                   ("candidate", candidate,
                                    active_rules if rules_path is None else candidate_rules)):
        if policy is None:
            outcomes.append(None)
            continue
        # explanations only where the actions are written (not part of what is compared)
        explain = name == "active" and out_actions is not None
        actions, _ = decide_rows(loaded, offline, scores, policy, lists=lists, explain=explain,
                                 rules=rule_set)
        outcomes.append(evaluate(name, policy, actions, rows, truth, fraud_rows))
    comparison = compare(outcomes[0], outcomes[1], truth)
    if out_actions is not None:
        _write_jsonl(out_actions, (a.to_json() for a in comparison.active.actions))
    if diff_out is not None:
        _write_jsonl(diff_out, (orjson.dumps(ch.to_dict()) for ch in comparison.changes))
    click.echo(f"model {loaded.version} on {loaded.scorer.active_provider}; {offline.summary()}; "
               f"{len(lists):,} list entries; labels: {len(truth.txns):,} transactions, "
               f"{len(truth.cards):,} cards; took {time.perf_counter() - began:.1f}s")
    for line in render(comparison):
        click.echo(line)
    for title, rule_set in (("active rules", active_rules), ("candidate rules", candidate_rules)):
        for line in _rule_lines(title, rule_set, loaded, offline, scores, active, lists,
                                fraud_rows):
            click.echo(line)


def _extra(*rule_sets: Any) -> tuple[str, ...]:  # noqa: ANN401 - RuleSets
    """The transaction fields the table keeps: merchant and amount, and what the rules read."""
    from app.rules.language import TXN_FIELDS

    names = set().union(*(r.names for r in rule_sets)) & TXN_FIELDS.keys()
    return ("merchant_id", "amount_minor",
            *sorted(names - {"merchant_id", "amount_minor", "card_id", "ts_ms"}))


def _rule_lines(title: str, rules: Any, loaded: Any, offline: Any, scores: Any,  # noqa: ANN401
                thresholds: Any, lists: Any, fraud_rows: frozenset[int]) -> list[str]:
    """Each rule's figures (app.rules.figures) over the log."""
    if not rules.rules:
        return []
    import numpy as np

    from app.rules.figures import render_figures, rule_figures
    from app.scoring.oracle import rule_columns

    table = offline.table
    n = table.num_rows
    entries = {}
    if lists.entries:
        for i, (c, m) in enumerate(zip(table.column("card_id").to_pylist(),
                                       table.column("merchant_id").to_pylist(), strict=True)):
            entry = lists.match(c, m)
            if entry is not None:
                entries[i] = entry
    fraud = np.zeros(n, dtype=bool)
    fraud[list(fraud_rows)] = True
    listed_rows = np.zeros(n, dtype=bool)
    listed_rows[list(entries)] = True
    wide = scores.astype(np.float64)
    figures = rule_figures(rules, rule_columns(offline, wide, entries), fraud=fraud,
                           amount=table.column("amount_minor").to_numpy(),
                           cards=np.array(table.column("card_id").to_pylist(), dtype=object),
                           model_acts=wide >= thresholds.alert, listed_rows=listed_rows)
    return render_figures(title, figures)
