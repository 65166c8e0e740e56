"""Benchmark of the action service: HTTP throughput/latency and the Lua script's Redis cost.

Prints two ratios, each against a baseline measured in the same run:

1. POST /v1/actions (new keys, the full path: auth, parse, Lua script in Redis) versus
   POST /bench/noop on the SAME server process, which does the same auth and parsing and
   answers 201 without touching Redis. Requests/s, p50 and p99 at bounded concurrency.
2. The apply script via EVALSHA versus `redis-benchmark -t set`, both driven by
   redis-benchmark against the same Redis server (ops/s).

Everything runs on loopback. The Redis database given by --db (default 14) is FLUSHed
before and after: do not point it at a database holding data you need.

    python benchmarks/action_service_bench.py [--redis-url URL] [--requests 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import multiprocessing
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
import redis  # noqa: E402
from aiohttp import web  # noqa: E402

from app.action_service.app import create_app  # noqa: E402
from app.action_service.replies import error_reply, json_reply  # noqa: E402
from app.action_service.store import apply_script_source  # noqa: E402
from app.actions import Action, ActionError, make_action  # noqa: E402
from app.settings import Settings, load_settings  # noqa: E402

TOKEN = "bench-token"


async def _noop(request: web.Request) -> web.Response:
    """Same auth and parsing as POST /v1/actions, no Redis: the HTTP-only baseline."""
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        return error_reply(401, "missing or wrong bearer token", "Authorization")
    try:
        action = Action.from_json(await request.read())
    except ActionError as exc:
        return error_reply(422, exc.reason, exc.field)
    return json_reply({"idempotency_key": action.idempotency_key, "outcome": "noop"}, 201)


def _serve(settings: Settings, port: int) -> None:
    app = create_app(settings)
    app.router.add_post("/bench/noop", _noop)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", "", ""))


def _actions(prefix: str, count: int) -> list[Action]:
    now = time.time_ns() // 1_000_000
    return [
        make_action(
            "freeze_card" if i % 2 else "alert_customer",
            card_id=f"bench-card-{i % 5000}",
            txn_id=f"{prefix}-{i}",
            ts_ms=now,
            score=0.9,
            model_version="bench",
            decided_at_ms=now,
        )
        for i in range(count)
    ]


async def _load(
    url: str, actions: list[Action], concurrency: int, max_s: float
) -> dict[str, float]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    queue = list(reversed(actions))
    deadline = time.monotonic() + max_s
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while queue and time.monotonic() < deadline:
                action = queue.pop()
                headers = {
                    "Authorization": f"Bearer {TOKEN}",
                    "Idempotency-Key": action.idempotency_key,
                    "Content-Type": "application/json",
                }
                started = time.perf_counter()
                async with session.post(url, data=action.to_json(), headers=headers) as response:
                    await response.read()
                latencies.append(time.perf_counter() - started)
                statuses[response.status] = statuses.get(response.status, 0) + 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": cuts[49] * 1000,
        "p99_ms": cuts[98] * 1000,
        "ok": statuses.get(201, 0),
    }


def _redis_benchmark(host: str, port: int, db: int, count: int, args: list[str]) -> float:
    cmd = [
        "redis-benchmark",
        "-h",
        host,
        "-p",
        str(port),
        "--dbnum",
        str(db),
        "-c",
        "32",
        "-n",
        str(count),
        "-r",
        "100000000",
        "--csv",
        *args,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout
    rows = [row for row in csv.reader(io.StringIO(out)) if row and row[0] != "test"]
    return float(rows[-1][1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url", default=None, help="default: REDIS_URL or the local stack")
    parser.add_argument("--db", type=int, default=14, help="Redis DB used and FLUSHed (default 14)")
    parser.add_argument("--requests", type=int, default=4000, help="HTTP requests per run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time cap per HTTP run")
    parser.add_argument("--redis-ops", type=int, default=100_000, help="redis-benchmark requests")
    opts = parser.parse_args()

    base = load_settings()
    url = _with_db(opts.redis_url or base.effective_redis_url, opts.db)
    settings = base.replace(redis_url=url, action_token=TOKEN)
    client = redis.Redis.from_url(url)
    client.flushdb()
    port = _free_port()
    server = multiprocessing.get_context("spawn").Process(
        target=_serve, args=(settings, port), daemon=True
    )
    server.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or not server.is_alive():
                    raise SystemExit("bench server did not start") from None
                time.sleep(0.05)
        root = f"http://127.0.0.1:{port}"
        asyncio.run(_load(f"{root}/bench/noop", _actions("warm", 300), opts.concurrency, 10))
        asyncio.run(_load(f"{root}/v1/actions", _actions("warm", 300), opts.concurrency, 10))
        noop = asyncio.run(
            _load(
                f"{root}/bench/noop",
                _actions("noop", opts.requests),
                opts.concurrency,
                opts.max_seconds,
            )
        )
        real = asyncio.run(
            _load(
                f"{root}/v1/actions",
                _actions("real", opts.requests),
                opts.concurrency,
                opts.max_seconds,
            )
        )
    finally:
        server.terminate()
        server.join(timeout=15)

    print(f"HTTP, concurrency {opts.concurrency}, loopback, one server process")
    for name, run in (("POST /bench/noop (no Redis)", noop), ("POST /v1/actions (new keys)", real)):
        print(
            f"  {name:30s} {run['requests']:6.0f} req  {run['rps']:8.0f} req/s  "
            f"p50 {run['p50_ms']:6.2f} ms  p99 {run['p99_ms']:6.2f} ms  201s {run['ok']:.0f}"
        )
    print(
        f"  ratio /v1/actions / noop: throughput {real['rps'] / noop['rps']:.2f}x, "
        f"p50 {real['p50_ms'] / noop['p50_ms']:.2f}x, p99 {real['p99_ms'] / noop['p99_ms']:.2f}x"
    )

    if shutil.which("redis-benchmark") is None:
        print("redis-benchmark not found: Lua ratio skipped")
        return
    host, rport = (
        client.connection_pool.connection_kwargs["host"],
        client.connection_pool.connection_kwargs["port"],
    )
    sha = client.script_load(apply_script_source())
    now = str(time.time_ns() // 1_000_000)
    ttl, max_age, margin = (
        str(settings.idempotency_ttl_s * 1000),
        str((settings.idempotency_ttl_s - settings.idempotency_margin_s) * 1000),
        str(settings.idempotency_margin_s * 1000),
    )

    def evalsha(action_type: str) -> list[str]:
        return [
            "EVALSHA",
            sha,
            "5",
            "idem:__rand_int__",
            "card:__rand_int__",
            "card:__rand_int__:alerts",
            "effects",
            "alerts",
            "key",
            "fp",
            action_type,
            "card",
            "txn",
            now,
            "0.9",
            "bench",
            now,
            ttl,
            max_age,
            margin,
            "100",
            "bench reason",
        ]

    set_ops = _redis_benchmark(host, rport, opts.db, opts.redis_ops, ["-t", "set"])
    freeze_ops = _redis_benchmark(host, rport, opts.db, opts.redis_ops, evalsha("freeze_card"))
    alert_ops = _redis_benchmark(host, rport, opts.db, opts.redis_ops, evalsha("alert_customer"))
    client.flushdb()
    client.close()
    print(f"Redis ({opts.redis_ops} requests each, 32 clients, redis-benchmark)")
    print(f"  SET                        {set_ops:10.0f} ops/s")
    print(
        f"  apply script freeze_card   {freeze_ops:10.0f} ops/s   ratio to SET {freeze_ops / set_ops:.2f}x"
    )
    print(
        f"  apply script alert_customer{alert_ops:10.0f} ops/s   ratio to SET {alert_ops / set_ops:.2f}x"
    )


if __name__ == "__main__":
    main()
