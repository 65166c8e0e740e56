"""`fraudstream demo`: the whole pipeline on this machine, end to end, with a readable summary."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from app.settings import Settings, load_settings, settings_environ
from app.stream import topics

console = Console()


@click.command()
@click.option("--cards", default=500, show_default=True, help="Cards in the generated log.")
@click.option("--txns", default=10_000, show_default=True, help="Transactions to generate.")
@click.option("--malformed", default=0.02, show_default=True, help="Fraction of bad messages.")
@click.option("--seed", default=7, show_default=True)
@click.option("--down", "stop_stack", is_flag=True, help="Stop Kafka and Redis at the end.")
@click.option("--timeout", "timeout_s", default=240, show_default=True,
              help="Seconds to wait for the worker to drain the log.")
def demo(cards: int, txns: int, malformed: float, seed: int, stop_stack: bool,
         timeout_s: int) -> None:
    """Bring the stack up, start a worker, generate and replay a log, summarise what happened.

    Each run uses fresh topics (prefix demo-<time>.) so its counts are its own.
    """
    from app.stack.kafka import StackError
    from app.stack.manager import Stack

    base = load_settings()
    stack = Stack(base)
    console.rule("[bold]fraudstream demo")
    try:
        report = stack.up()
    except StackError as exc:
        console.print(f"[red]stack up failed:[/red] {exc}")
        sys.exit(1)
    console.print(f"stack ready in {report.seconds['total']:.1f}s "
                  f"(kafka {base.effective_kafka_bootstrap}, redis {base.effective_redis_url})")
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    settings = base.replace(kafka_bootstrap=base.effective_kafka_bootstrap,
                            redis_url=base.effective_redis_url,
                            topic_prefix=f"demo-{stamp}.", app_id=f"fraudstream-demo-{stamp}")
    ok = False
    try:
        ok = _run(settings, cards=cards, txns=txns, malformed=malformed, seed=seed,
                  timeout_s=timeout_s)
    finally:
        if stop_stack:
            console.print(f"stopped: {', '.join(stack.down()) or 'nothing'}")
        else:
            console.print("The stack keeps running: [bold]fraudstream stack down[/bold] stops it "
                          "(or run the demo with --down).")
    sys.exit(0 if ok else 1)


def _run(settings: Settings, *, cards: int, txns: int, malformed: float, seed: int,
         timeout_s: int) -> bool:
    from app.datagen.config import GeneratorConfig
    from app.datagen.generator import generate_log
    from app.stream.inspect import group_lag, read_topic, topic_sizes
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

    worker = _start_worker(settings, workdir)
    try:
        sent = asyncio.run(replay_messages(settings, lines))
        console.print(f"replayed {sent.sent} messages at {sent.rate:,.0f} msg/s")
        source = settings.topic(topics.TRANSACTIONS)
        deadline = time.monotonic() + timeout_s
        with console.status("worker consuming…") as status:
            while True:
                lag = asyncio.run(group_lag(settings, settings.app_id, source))
                status.update(f"worker consuming… lag {lag}")
                if lag == 0:
                    break
                if time.monotonic() > deadline or worker.poll() is not None:
                    console.print(f"[red]worker did not drain (lag {lag}).[/red] Log tail:\n"
                                  f"{_tail(workdir / 'worker.log')}")
                    return False
                time.sleep(0.5)  # polling the consumer lag with a deadline
        names = [settings.topic(t) for t in topics.PIPELINE_TOPICS]
        sizes = asyncio.run(topic_sizes(settings, names))
        dlq = asyncio.run(read_topic(settings, settings.topic(topics.TRANSACTIONS_DLQ)))
    finally:
        _stop(worker)

    table = Table("topic", "messages", title="What the pipeline wrote")
    for name in names:
        table.add_row(name, str(sizes[name]))
    console.print(table)
    reasons = Counter(r.headers.get("fraudstream.reason_code", "?") for r in dlq)
    rt = Table("DLQ reason", "count")
    for reason, n in reasons.most_common():
        rt.add_row(reason, str(n))
    console.print(rt)
    served = sizes[settings.topic(topics.FEATURES_SERVED)]
    late = sizes[settings.topic(topics.TRANSACTIONS_LATE)]
    total = sizes[source]
    balanced = served + late + len(dlq) == total
    colour = "green" if balanced else "red"
    console.print(f"[{colour}]{total} in = {served} served + {late} late + {len(dlq)} dead-lettered"
                  f"{'' if balanced else '  (does not add up!)'}[/{colour}]")
    return balanced


def _start_worker(settings: Settings, workdir: Path) -> subprocess.Popen[bytes]:
    """The demo's own worker process, ended by its PID when the demo ends."""
    env = settings_environ(settings)
    env["PYTHONUNBUFFERED"] = "1"
    with open(workdir / "worker.log", "ab") as out:
        return subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "app.cli.main", "worker", "--loglevel", "WARNING"],
            env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _tail(path: Path, n: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
