"""`fraudstream demo`: the whole pipeline on this machine, end to end, with a readable summary."""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console

from app.cli.kept import KeptRun, kept_runs, stop_run
from app.cli.summary import currencies_of
from app.kafka import topics
from app.security.tokens import client_token
from app.settings import Settings, load_settings
from app.stack.process import ChildProcess, free_port, settings_env

console = Console()

@click.command()
@click.option("--cards", default=500, show_default=True, help="Cards in the generated log.")
@click.option("--txns", default=10_000, show_default=True, help="Transactions to generate.")
@click.option("--malformed", default=0.02, show_default=True, help="Fraction of bad messages.")
@click.option("--seed", default=7, show_default=True)
@click.option("--down", "stop_stack", is_flag=True, help="Stop Kafka and Redis at the end.")
@click.option("--keep", is_flag=True,
              help="Leave the worker and the action service running, and print how to look around.")
@click.option("--stop", "stop_kept", is_flag=True,
              help="Only stop what earlier `demo --keep` runs left running, and exit.")
@click.option("--secure", is_flag=True,
              help="On the secure profile: SASL_SSL Kafka, TLS Redis with an ACL user, tokens.")
@click.option("--timeout", "timeout_s", default=240, show_default=True,
              help="Seconds to wait for the worker to drain the log.")
def demo(cards: int, txns: int, malformed: float, seed: int, stop_stack: bool, keep: bool,
         stop_kept: bool, secure: bool, timeout_s: int) -> None:
    """Bring the stack up, start a worker, generate and replay a log, summarise what happened.

    Each run uses fresh topics (prefix demo-<time>.) so its counts are its own.
    """
    from app.stack.kafka import StackError
    from app.stack.manager import Stack

    base = load_settings()
    if stop_kept:
        _stop_kept(base)
        return
    if keep and stop_stack:
        raise click.UsageError("--keep and --down are exclusive")
    stack = Stack(base)
    if secure:
        from app.stack.secure import SecureStack

        stack = SecureStack(base)
        base = stack.settings  # clients use TLS, SASL and the generated secrets
    console.rule("[bold]fraudstream demo")
    try:
        report = stack.up()
    except StackError as exc:
        console.print(f"[red]stack up failed:[/red] {exc}")
        sys.exit(1)
    console.print(f"stack ready in {report.seconds['total']:.1f}s "
                  f"(kafka {base.effective_kafka_bootstrap}, redis {base.effective_redis_url})")
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    port = free_port()
    settings = base.replace(kafka_bootstrap=base.effective_kafka_bootstrap,
                            redis_url=base.effective_redis_url,
                            topic_prefix=f"demo-{stamp}.", app_id=f"fraudstream-demo-{stamp}",
                            action_service_port=port,
                            action_service_url=f"http://127.0.0.1:{port}")
    ok = False
    try:
        ok = _run(settings, cards=cards, txns=txns, malformed=malformed, seed=seed,
                  timeout_s=timeout_s, keep=keep)
    finally:
        if stop_stack:
            console.print(f"stopped: {', '.join(stack.down()) or 'nothing'}")
        elif not keep:
            console.print("Kafka and Redis keep running: [bold]fraudstream stack down[/bold] "
                          "stops them. [bold]fraudstream demo --keep[/bold] also leaves the "
                          "worker and the action service running to look around.")
    sys.exit(0 if ok else 1)


def _run(settings: Settings, *, cards: int, txns: int, malformed: float, seed: int,
         timeout_s: int, keep: bool) -> bool:
    from app.datagen.config import GeneratorConfig
    from app.datagen.generator import generate_log
    from app.kafka.inspect import read_topic, topic_sizes
    from app.kafka.labelimport import send_labels
    from app.kafka.replay import replay_messages
    from app.kafka.topics import ensure_topics

    asyncio.run(ensure_topics(settings))
    workdir = settings.state_dir.resolve() / "demo" / settings.topic_prefix.rstrip(".")
    workdir.mkdir(parents=True, exist_ok=True)
    # future-dated bad messages are built an hour ahead so they stay invalid while we run
    now_ms = time.time_ns() // 1_000_000 + 3_600_000
    log = generate_log(GeneratorConfig(cards=cards, txns=txns, seed=seed, malformed=malformed,
                                       out_of_order=0.02, redelivery=0.01, now_ms=now_ms))
    lines = [line for line, _kind in log.iter_lines()]
    (workdir / "txns.jsonl").write_bytes(b"\n".join(lines) + b"\n")

    # the labels first, as a deployment has its label history: the merchant features of each
    # transaction count only the labels reported before it (docs/features.md)
    labels_path = workdir / "labels.jsonl"
    labels_path.write_bytes(b"".join(log.label_chunks()))
    imported = asyncio.run(send_labels(settings, labels_path, source="demo"))
    counts = log.counts
    console.print(f"generated {counts.transactions:,} transactions ({counts.fraud:,} fraud) + "
                  f"{counts.malformed:,} malformed + {counts.redelivered:,} redelivered",
                  highlight=False)

    web_port = free_port()
    service = _spawn(settings, workdir, "action-service",
                     ["action-service", "--port", str(settings.action_service_port)], keep)
    worker = _spawn(settings, workdir, "worker",
                    ["worker", "--loglevel", "WARNING", "--web-port", str(web_port)], keep)
    procs = {"action service": service, "worker": worker}
    ok = False
    try:
        sent = asyncio.run(replay_messages(settings, lines))
        console.print(f"replayed {sent.sent:,} messages at {sent.rate:,.0f} msg/s after "
                      f"{imported.sent:,} labels", highlight=False)
        if not _wait_drained(settings, procs, workdir, timeout_s):
            return False
        names = [settings.topic(t) for t in topics.PIPELINE_TOPICS]
        sizes = asyncio.run(topic_sizes(settings, names))
        dlq = asyncio.run(read_topic(settings, settings.topic(topics.TRANSACTIONS_DLQ)))
        actions = asyncio.run(read_topic(settings, settings.topic(topics.ACTIONS)))
        frozen = _frozen_cards(settings, actions)
        ok = render_summary(settings, sizes, dlq, actions, frozen, workdir,
                            currencies_of(lines, {str(v.get("txn_id")) for v in frozen}))
    finally:
        if not (keep and ok):
            for proc in procs.values():
                proc.stop(timeout_s=30)
    if keep and ok:
        run = KeptRun(workdir=str(workdir), topic_prefix=settings.topic_prefix,
                      app_id=settings.app_id, service_url=settings.action_service_url,
                      worker_url=f"http://127.0.0.1:{web_port}",
                      pids={name: p.pid for name, p in procs.items()})
        run.save()
        console.rule("[bold]still running (--keep)")
        for line in run.look_around(client_token(settings),
                                    frozen[0]["card_id"] if frozen else None):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    return ok


def _wait_drained(settings: Settings, procs: dict[str, ChildProcess], workdir: Path,
                  timeout_s: int) -> bool:
    """Poll consumer lag on transactions and actions until both are 0, with a deadline."""
    from app.kafka.inspect import group_lag

    deadline = time.monotonic() + timeout_s
    with console.status("worker consuming…") as status:
        while True:
            lag = sum(asyncio.run(group_lag(settings, settings.app_id, settings.topic(t)))
                      for t in (topics.TRANSACTIONS, topics.ACTIONS))
            status.update(f"worker consuming and dispatching… lag {lag}")
            if lag == 0:
                return True
            dead = [name for name, p in procs.items() if not p.alive()]
            if time.monotonic() > deadline or dead:
                console.print(f"[red]the pipeline did not drain (lag {lag}; exited: {dead}).[/red]"
                              f" Logs in {workdir}")
                return False
            time.sleep(0.5)  # polling the consumer lag with a deadline


def _frozen_cards(settings: Settings, actions: list) -> list[dict]:  # noqa: ANN401
    """The action service's view of every card this run decided to freeze."""
    import orjson

    cards = sorted({orjson.loads(r.value)["card_id"] for r in actions
                    if orjson.loads(r.value)["type"] == "freeze_card"})
    views = []
    for card in cards:
        req = urllib.request.Request(f"{settings.action_service_url}/v1/cards/{card}",
                                     headers={"Authorization": f"Bearer {client_token(settings)}"})
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - loopback
            views.append(orjson.loads(resp.read()))
    return views


def render_summary(settings: Settings, sizes: dict[str, int], dlq: list, actions: list,
                   frozen: list[dict], workdir: Path,
                   currencies: dict[str, str] | None = None) -> bool:
    """Print what the run did in a dozen lines; True when every message is accounted for.
    `currencies`: txn_id -> currency of the freezing transactions (their money's unit)."""
    import orjson

    from app.cli.summary import summarise

    (workdir / "frozen-cards.jsonl").write_bytes(b"".join(orjson.dumps(v) + b"\n"
                                                          for v in frozen))
    reasons = Counter(r.headers.get("fraudstream.reason_code", "?") for r in dlq)
    decoded = [orjson.loads(r.value) for r in actions]
    summary = summarise(settings.topic_prefix, sizes, reasons,
                        [(a["idempotency_key"], a["type"]) for a in decoded], frozen,
                        "frozen-cards.jsonl", currencies)
    for line in summary.lines:
        console.print(line, highlight=False, markup=False)
    style = "green" if summary.balanced else "red"
    for line in summary.verdict:
        console.print(line, style=style, highlight=False, markup=False)
    console.print(f"{'files':<13}{shown_path(workdir)}/  (*.log, *.jsonl)",
                  highlight=False, markup=False, soft_wrap=True)
    return summary.balanced


def shown_path(path: Path) -> str:
    """`path` relative to the working directory when it lies below it (shorter to read)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _spawn(settings: Settings, workdir: Path, name: str, args: list[str],
           keep: bool) -> ChildProcess:
    """A demo child process, logging to workdir/NAME.log, ended by its PID when the demo ends.

    A kept one runs in its own session so that Ctrl-C in the demo's terminal does not reach it.
    """
    return ChildProcess([sys.executable, "-m", "app.cli.main", *args], settings_env(settings),
                        workdir / f"{name}.log", new_session=keep)


def _stop_kept(settings: Settings) -> None:
    runs = kept_runs(settings.state_dir)
    if not runs:
        console.print("no demo run left anything running")
    for run in runs:
        stopped = stop_run(run)
        console.print(f"{run.topic_prefix.rstrip('.')}: stopped "
                      f"{', '.join(stopped) or 'nothing (already gone)'}")
