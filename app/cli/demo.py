"""`fraudstream demo`: the whole pipeline on this machine, end to end, with a readable summary."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from app.cli.kept import KeptRun, kept_runs, stop_run
from app.security.tokens import client_token
from app.settings import Settings, load_settings, settings_environ
from app.stream import topics

console = Console()

#: Frozen cards listed in the summary; all of them go to <workdir>/frozen-cards.jsonl.
FROZEN_ROWS = 10


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
    port = _free_port()
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
    from app.stream.inspect import read_topic, topic_sizes
    from app.stream.topics import ensure_topics
    from app.transactions.producer import replay_messages

    asyncio.run(ensure_topics(settings))
    workdir = settings.state_dir.resolve() / "demo" / settings.topic_prefix.rstrip(".")
    workdir.mkdir(parents=True, exist_ok=True)
    # future-dated bad messages are built an hour ahead so they stay invalid while we run
    now_ms = time.time_ns() // 1_000_000 + 3_600_000
    log = generate_log(GeneratorConfig(cards=cards, txns=txns, seed=seed, malformed=malformed,
                                       out_of_order=0.02, redelivery=0.01, now_ms=now_ms))
    lines = [line for line, _kind in log.iter_lines()]
    (workdir / "txns.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    counts = log.counts
    console.print(f"generated {len(lines)} messages: {counts.transactions} transactions, "
                  f"{counts.malformed} malformed, {counts.redelivered} redelivered, "
                  f"{counts.fraud} labelled fraud  → {workdir / 'txns.jsonl'}")

    web_port = _free_port()
    service = _spawn(settings, workdir, "action-service",
                     ["action-service", "--port", str(settings.action_service_port)], keep)
    worker = _spawn(settings, workdir, "worker",
                    ["worker", "--loglevel", "WARNING", "--web-port", str(web_port)], keep)
    procs = {"action service": service, "worker": worker}
    ok = False
    try:
        sent = asyncio.run(replay_messages(settings, lines))
        console.print(f"replayed {sent.sent} messages at {sent.rate:,.0f} msg/s")
        if not _wait_drained(settings, procs, workdir, timeout_s):
            return False
        names = [settings.topic(t) for t in topics.PIPELINE_TOPICS]
        sizes = asyncio.run(topic_sizes(settings, names))
        dlq = asyncio.run(read_topic(settings, settings.topic(topics.TRANSACTIONS_DLQ)))
        actions = asyncio.run(read_topic(settings, settings.topic(topics.ACTIONS)))
        frozen = _frozen_cards(settings, actions)
        ok = render_summary(settings, sizes, dlq, actions, frozen, workdir)
    finally:
        if not (keep and ok):
            for proc in procs.values():
                _stop(proc)
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


def _wait_drained(settings: Settings, procs: dict[str, subprocess.Popen[bytes]], workdir: Path,
                  timeout_s: int) -> bool:
    """Poll consumer lag on transactions and actions until both are 0, with a deadline."""
    from app.stream.inspect import group_lag

    deadline = time.monotonic() + timeout_s
    with console.status("worker consuming…") as status:
        while True:
            lag = sum(asyncio.run(group_lag(settings, settings.app_id, settings.topic(t)))
                      for t in (topics.TRANSACTIONS, topics.ACTIONS))
            status.update(f"worker consuming and dispatching… lag {lag}")
            if lag == 0:
                return True
            dead = [name for name, p in procs.items() if p.poll() is not None]
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
                   frozen: list[dict], workdir: Path | None = None) -> bool:
    """Print what the run did; True when every message is accounted for."""
    import orjson

    table = Table("topic", "messages", title="What the pipeline wrote")
    for name, size in sizes.items():
        table.add_row(name.removeprefix(settings.topic_prefix), f"{size:,}")
    console.print(table)
    reasons = Counter(r.headers.get("fraudstream.reason_code", "?") for r in dlq)
    console.print("dead-lettered by reason: " + (", ".join(
        f"{reason} {n}" for reason, n in reasons.most_common()) or "none"), highlight=False)
    keys = {orjson.loads(r.value)["idempotency_key"]: orjson.loads(r.value)["type"] for r in actions}
    by_type = Counter(keys.values())
    ft = Table("card", "status", "frozen by txn", "alerts", title=f"Frozen cards ({len(frozen)})")
    for view in frozen[:FROZEN_ROWS]:
        ft.add_row(view["card_id"], view["status"], str(view.get("txn_id")),
                   str(view.get("alerts_total", len(view.get("alerts", [])))))
    if len(frozen) > FROZEN_ROWS:
        where = f": all in {workdir / 'frozen-cards.jsonl'}" if workdir else ""
        ft.caption = f"the first {FROZEN_ROWS} of {len(frozen)}{where}"
    if workdir is not None:
        (workdir / "frozen-cards.jsonl").write_bytes(b"".join(orjson.dumps(v) + b"\n"
                                                              for v in frozen))
    console.print(ft)
    freezes = by_type.get("freeze_card", 0)
    console.print(f"actions: {freezes} freeze_card, {by_type.get('alert_customer', 0)} "
                  f"alert_customer ({len(actions) - len(keys)} re-sent copies absorbed by the "
                  f"action service)")
    if freezes > len(frozen):
        console.print(f"  {freezes} freeze decisions for {len(frozen)} cards: every transaction "
                      f"scored above the freeze threshold decides a freeze; the first freezes "
                      f"the card, the later ones find it frozen already.", highlight=False)
    source = sizes[settings.topic(topics.TRANSACTIONS)]
    served = sizes[settings.topic(topics.FEATURES_SERVED)]
    late = sizes[settings.topic(topics.TRANSACTIONS_LATE)]
    all_frozen = all(v["status"] == "frozen" for v in frozen)
    balanced = served + late + len(dlq) == source and all_frozen
    colour = "green" if balanced else "red"
    console.print(f"[{colour}]{source} in = {served} served + {late} late + {len(dlq)} "
                  f"dead-lettered; every card decided frozen is frozen: {all_frozen}[/{colour}]")
    return balanced


def _spawn(settings: Settings, workdir: Path, name: str, args: list[str],
           keep: bool) -> subprocess.Popen[bytes]:
    """A demo child process, logging to workdir/NAME.log, ended by its PID when the demo ends.

    A kept one runs in its own session so that Ctrl-C in the demo's terminal does not reach it.
    """
    env = settings_environ(settings)
    env["PYTHONUNBUFFERED"] = "1"
    with open(workdir / f"{name}.log", "ab") as out:
        return subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "app.cli.main", *args], start_new_session=keep,
            env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _stop_kept(settings: Settings) -> None:
    runs = kept_runs(settings.state_dir)
    if not runs:
        console.print("no demo run left anything running")
    for run in runs:
        stopped = stop_run(run)
        console.print(f"{run.topic_prefix.rstrip('.')}: stopped "
                      f"{', '.join(stopped) or 'nothing (already gone)'}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
