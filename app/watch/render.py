"""A Frame drawn with rich: throughput, lag per partition, latency per hop, outcomes, model."""

from __future__ import annotations

from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.table import Column, Table
from rich.text import Text

from app.watch.frame import Frame

#: Partitions shown one per row; beyond this only the busiest are listed (with a count).
MAX_PARTITION_ROWS = 16


def _rate(value: float | None) -> str:
    return "…" if value is None else f"{value:,.0f}/s"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def _budget(frame: Frame) -> Text:
    b = frame.budget
    assert b is not None
    window = "since start" if not b.window_s else f"last {b.window_s:.0f} s"
    if b.p99_s is None:
        return Text(f"latency budget {b.budget_s * 1000:.0f} ms: no event served ({window})")
    share = "-" if b.within is None else f"{b.within:.2%}"
    return Text(f"latency budget: p99 event → served {_ms(b.p99_s)} of "
                f"{b.budget_s * 1000:.0f} ms, {share} of {b.events:,} events within ({window})",
                style="green" if b.met else "red")


def _columns(*headers: str) -> list[Column]:
    """Table columns whose cells keep to one line (a hop name is never cut to `append…`)."""
    return [Column(h, no_wrap=True, justify="left" if i == 0 else "right")
            for i, h in enumerate(headers)]


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _quality(frame: Frame) -> Text:
    q = frame.quality
    if q is None:
        return Text("quality: `fraudstream quality` not answering (precision and recall need it)",
                    style="dim")
    return Text(f"quality (labels so far): precision of freezes {_ratio(q.precision)} · recall "
                f"of fraud {_ratio(q.recall)} · labels within 7 d: {_ratio(q.precision_7d)} / "
                f"{_ratio(q.recall_7d)} · {q.freezes:,} freezes, {q.fraud:,} fraud")


#: Drift rows shown (worst first); the rest are summarised in one line.
MAX_DRIFT_ROWS = 6
_LEVEL_STYLE = {"alert": "red", "watch": "yellow", "ok": "green", "n/a": "dim"}


def _drift(frame: Frame) -> RenderableType:
    view = frame.drift
    if view is None:
        return Text("drift: not counted (no worker has a model with a drift reference)",
                    style="dim")
    events = ", ".join(f"{w} {n:,} events" for w, n in view.events.items())
    head = Text(f"drift vs training reference of {', '.join(view.models)}: PSI watch >= "
                f"{view.watch:g}, alert >= {view.alert:g} ({events})",
                style=_LEVEL_STYLE[view.worst])
    table = Table("series", *(f"PSI {w}" for w in view.events))
    for row in view.rows[:MAX_DRIFT_ROWS]:
        cells = [Text("n/a" if v != v else f"{v:.3f}", style=_LEVEL_STYLE[row.levels[w]])
                 for w, v in row.psi.items()]
        table.add_row(row.series, *cells)
    if len(view.rows) > MAX_DRIFT_ROWS:
        table.caption = f"{len(view.rows) - MAX_DRIFT_ROWS} more series, all lower"
    return Group(head, table)


def render(frame: Frame, *, title: str) -> RenderableType:
    """The whole screen for one refresh."""
    stats = (f"in {_rate(frame.in_per_s)}   out {_rate(frame.out_per_s)}   "
             f"actions {_rate(frame.actions_per_s)}   lag {frame.lag_messages:,} msgs   "
             f"workers {frame.workers_up}/{frame.workers_total}")
    models = ", ".join(f"{v} on {p}" for v, p in frame.models) or "no worker reports a model"
    head = [Text(title, style="bold"), Text(stats), Text(f"model {models}")]
    if frame.budget is not None:
        head.append(_budget(frame))

    # cells never wrap: the two tables sit side by side when both fit, else one above the other
    parts = Table(*_columns("partition", "lag (msgs)", "lag (s)"),
                  title="transactions: consumer lag", title_justify="left")
    shown = sorted(frame.partitions, key=lambda p: (-p.lag_messages, p.partition))
    shown = shown[:MAX_PARTITION_ROWS] if len(shown) > MAX_PARTITION_ROWS else frame.partitions
    for row in shown:
        parts.add_row(str(row.partition), f"{row.lag_messages:,}",
                      "-" if row.lag_seconds is None else f"{row.lag_seconds:.2f}")
    if len(frame.partitions) > len(shown):
        parts.caption = f"{len(frame.partitions) - len(shown)} more partitions not shown"

    window = "last interval" if frame.hops_recent else "since start"
    hops = Table(*_columns("hop", "p50", "p99", "events"), title=f"latency per hop ({window})",
                 title_justify="left")
    for hop in frame.hops:
        hops.add_row(hop.hop, _ms(hop.p50_s), _ms(hop.p99_s), f"{hop.count:,}")

    service = "" if frame.service_up else " (action service not answering)"
    outcomes = Text(f"scored {frame.scored:,} · dead-lettered {frame.dlq:,} · late "
                    f"{frame.late:,} · effects applied {frame.effects:,} · replays absorbed "
                    f"{frame.replays_absorbed:,}{service}")

    if frame.reviews_open is not None:
        age = "" if not frame.reviews_open else f", oldest {frame.review_oldest_s or 0:,.0f} s"
        hits = ", ".join(f"{rule} {n:,.0f}" for rule, n in sorted(frame.rule_hits.items()))
        outcomes.append(f"\nreviews open {frame.reviews_open:,}{age} · rule hits: "
                        f"{hits or 'none'}")

    body = Columns([parts, hops], padding=(0, 3))
    problems = [Text(f"! {p}", style="yellow") for p in frame.problems]
    return Group(*head, outcomes, _quality(frame), body, _drift(frame), *problems)
