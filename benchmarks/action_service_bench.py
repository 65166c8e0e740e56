"""Benchmark of the action service against a bare aiohttp server, side by side in one run.

Each round also prints the CPU per request of the client (this process), Redis and both servers,
how many cores each run kept busy, and `CPU-bound ceiling`: the ratio a service costing no more
CPU per request than the bare server would reach here (one process, so one core at most, and the
machine's cores shared with the client and Redis at their cost per request in the service's run).

Everything runs on loopback and on a redis-server of its own (temporary directory, free port,
AOF with `appendfsync always`), started here and stopped by its PID at the end:

- the ceiling: a bare aiohttp server (one process, no middleware) whose only route reads the
  body, parses it with orjson and answers 201 with a small JSON body;
- the action service: `fraudstream action-service` (one process, production settings) on that
  Redis.

A closed-loop client (raw keep-alive HTTP/1.1 over asyncio streams, requests pre-built so the
client stays light) sends each server the same requests at concurrency 8 and 32, alternating
which server goes first each round. Printed figures are ratios service / bare of the same
round (req/s and p99), then their median over the rounds. A third run at concurrency 32 mixes
30 % replays of keys applied earlier and 5 % concurrent duplicates (the same new key sent on
two connections at once).

With `--layout cluster` (or `both`) it also starts a Redis Cluster of its own (3 masters with
one replica each, ports 17020-17031, AOF always) and runs two services on it side by side,
WAIT off (FRAUDSTREAM_REDIS_WAIT_REPLICAS=0) and on (=1), with the bare server in the same
rounds: printed as ratios against bare and as the cost of WAIT (on / off, same round).

    python benchmarks/action_service_bench.py [--requests 4000] [--rounds 3]
        [--layout single|cluster|both]
        [--py-spy OUT.txt]   # also profile the service during its first c=32 run (py-spy)
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

from app.actions import Action, make_action
from app.settings import load_settings, settings_environ
from app.stack.redis import RedisNode
from app.stack.redis_cluster import RedisCluster

TOKEN = "bench-token"
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _bare(request: web.Request) -> web.Response:
    """The ceiling: read and parse the JSON body, answer 201."""
    body = orjson.loads(await request.read())
    return web.Response(
        body=orjson.dumps({"idempotency_key": body["idempotency_key"], "outcome": "noop"}),
        status=201,
        content_type="application/json",
    )


def _serve_bare(port: int) -> None:
    app = web.Application()
    app.router.add_post("/v1/actions", _bare)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def _wait_listening(port: int, alive: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline or not alive():  # type: ignore[operator]
                raise SystemExit(f"server on port {port} did not start") from None
            time.sleep(0.05)  # poll with a deadline


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


def _request(port: int, action: Action) -> bytes:
    body = action.to_json()
    head = (
        f"POST /v1/actions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nIdempotency-Key: {action.idempotency_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class Run:
    """One closed-loop run: latencies (s), statuses, elapsed (s)."""

    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    elapsed: float = 0.0
    cpu_s: float = float("nan")  # CPU seconds the server process spent during the run
    client_cpu_s: float = float("nan")  # this process (the load client) during the run
    redis_cpu_s: float = float("nan")  # redis-server during the run (single layout)

    @property
    def cpu_us(self) -> float:
        """Server CPU microseconds per request."""
        return 1e6 * self.cpu_s / len(self.latencies)

    @property
    def system_us(self) -> float:
        """CPU microseconds per request of everything the run needs: client, server, Redis."""
        redis = 0.0 if self.redis_cpu_s != self.redis_cpu_s else self.redis_cpu_s
        return 1e6 * (self.cpu_s + self.client_cpu_s + redis) / len(self.latencies)

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.elapsed

    def pct(self, q: int) -> float:
        return statistics.quantiles(self.latencies, n=100)[q - 1] * 1000


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return status


async def _load(port: int, jobs: list[list[bytes]], concurrency: int, max_s: float) -> Run:
    """Each job is one request, or several sent at once on their own connections."""
    run = Run()
    queue = list(reversed(jobs))
    width = max(len(job) for job in jobs)
    deadline = time.monotonic() + max_s

    async def worker() -> None:
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(width)]
        try:
            while queue and time.monotonic() < deadline:
                job = queue.pop()
                started = time.perf_counter()
                if len(job) == 1:
                    statuses = [await _exchange(*conns[0], job[0])]
                else:
                    statuses = await asyncio.gather(
                        *(_exchange(*conns[i], req) for i, req in enumerate(job))
                    )
                elapsed = time.perf_counter() - started
                for status in statuses:
                    run.latencies.append(elapsed)
                    run.statuses[status] = run.statuses.get(status, 0) + 1
        finally:
            for _, writer in conns:
                writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    run.elapsed = time.perf_counter() - began
    return run


def _line(name: str, run: Run) -> str:
    codes = " ".join(f"{k}:{v}" for k, v in sorted(run.statuses.items()))
    return (
        f"  {name:9s} {len(run.latencies):6d} req {run.rps:8.0f} req/s  p50 {run.pct(50):6.2f} ms"
        f"  p99 {run.pct(99):6.2f} ms  cpu {run.cpu_us:5.0f} us/req  [{codes}]"
    )


def _ceiling(bare: Run, service: Run) -> float:
    """The best service/bare req/s ratio this machine allows a service that costs no more CPU
    per request than the bare server: one process (a core at most), and the cores shared with
    the client and Redis at what they cost per request in the service's run."""
    n = len(service.latencies)
    per_req_us = bare.cpu_us + 1e6 * (service.client_cpu_s + service.redis_cpu_s) / n
    best = min(1e6 / bare.cpu_us, (os.cpu_count() or 1) * 1e6 / per_req_us)
    return best / bare.rps


def _measured(pid: int | None, load: Callable[[], Run], redis_pid: int | None = None) -> Run:
    """Run `load` and record the CPU time the server `pid`, this client and Redis spent."""
    before, client, redis = _cpu_s(pid), time.process_time(), _cpu_s(redis_pid)
    run = load()
    run.cpu_s = _cpu_s(pid) - before
    run.client_cpu_s = time.process_time() - client
    run.redis_cpu_s = _cpu_s(redis_pid) - redis
    return run


def _mixed_jobs(
    port: int, fresh: list[Action], applied: list[Action], rng: random.Random
) -> list[list[bytes]]:
    """30 % replays of applied keys, 5 % concurrent duplicates, the rest new keys."""
    jobs: list[list[bytes]] = []
    fresh_iter = iter(fresh)
    for _ in range(len(fresh)):
        roll = rng.random()
        if roll < 0.30:
            jobs.append([_request(port, rng.choice(applied))])
        elif roll < 0.35:
            req = _request(port, next(fresh_iter))
            jobs.append([req, req])
        else:
            jobs.append([_request(port, next(fresh_iter))])
    return jobs


def _metric(port: int, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:  # noqa: S310
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return float("nan")


def _py_spy() -> str:
    """py-spy from PATH, else the one installed beside this interpreter (a venv's bin)."""
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4000, help="requests per run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per concurrency")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="time cap per run")
    parser.add_argument("--lanes", type=int, default=None,
                        help="FRAUDSTREAM_ACTION_APPLY_CONNECTIONS of the service (default: its own)")
    parser.add_argument("--py-spy", default=None, help="write a py-spy raw profile here")
    parser.add_argument("--layout", choices=("single", "cluster", "both"), default="single",
                        help="single Redis (bare vs service), Redis Cluster (WAIT on vs off), both")
    parser.add_argument("--cluster-port", type=int, default=17020,
                        help="first port of the benchmark's Redis Cluster (12 ports)")
    opts = parser.parse_args()
    if opts.layout in ("single", "both"):
        _single_layout(opts)
    if opts.layout in ("cluster", "both"):
        _cluster_layout(opts)


def _cluster_layout(opts: argparse.Namespace) -> None:
    """Bare, service WAIT off and service WAIT on, on one Redis Cluster, in the same rounds."""
    tmp = Path(tempfile.mkdtemp(prefix="rc-bench-"))
    cluster = RedisCluster(load_settings({}, redis_appendfsync="always"),
                           base_port=opts.cluster_port, state_dir=tmp)
    procs: list[subprocess.Popen[bytes]] = []
    bare_port = _free_port()
    bare = multiprocessing.get_context("spawn").Process(
        target=_serve_bare, args=(bare_port,), daemon=True
    )
    try:
        cluster.start()
        ports, pids = {"bare": bare_port}, {}
        for name, replicas in (("wait-off", 0), ("wait-on", 1)):
            settings = load_settings({}, redis_url=cluster.seed_url, action_token=TOKEN,
                                     redis_wait_replicas=replicas, labels_forward=False)
            port = _free_port()
            env = {**settings_environ(settings), "PYTHONPATH": str(ROOT)}
            proc = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", "app.cli.main", "action-service", "--port", str(port)],
                env=env, cwd=ROOT)
            procs.append(proc)
            _wait_listening(port, lambda proc=proc: proc.poll() is None)
            ports[name], pids[name] = port, proc.pid
        bare.start()
        _wait_listening(bare_port, bare.is_alive)
        pids["bare"] = bare.pid
        for name, port in ports.items():
            asyncio.run(_load(port, [[_request(port, a)] for a in _actions(f"warm-{name}", 500)],
                              8, 10))
        names = list(ports)
        print(f"cluster layout: 3 masters x 1 replica on {cluster.seed_url}")
        summary: dict[int, list[tuple[float, float, float, float]]] = {}
        for concurrency in (8, 32):
            print(f"concurrency {concurrency} (new keys), {opts.requests} requests per run")
            for rnd in range(opts.rounds):
                order = names[rnd % 3:] + names[:rnd % 3]
                runs: dict[str, Run] = {}
                for name in order:
                    # new keys for each server: both services write the same cluster
                    acts = _actions(f"cl{concurrency}r{rnd}-{name}", opts.requests)
                    jobs = [[_request(ports[name], a)] for a in acts]
                    runs[name] = _measured(pids[name], lambda p=ports[name], j=jobs,
                                           c=concurrency: asyncio.run(_load(
                                               p, j, c, opts.max_seconds)))
                for name in names:
                    print(_line(name, runs[name]))
                off, on, base = runs["wait-off"], runs["wait-on"], runs["bare"]
                row = (off.rps / base.rps, on.rps / base.rps, on.rps / off.rps,
                       on.pct(99) / off.pct(99))
                summary.setdefault(concurrency, []).append(row)
                print(f"  round {rnd}: req/s wait-off/bare {row[0]:.2f}x, wait-on/bare "
                      f"{row[1]:.2f}x; WAIT cost on/off req/s {row[2]:.2f}x, p99 {row[3]:.2f}x")
        print("cluster summary (median over rounds, same-round ratios)")
        for concurrency, rows in summary.items():
            med = [statistics.median(r[i] for r in rows) for i in range(4)]
            print(f"  c={concurrency:<3d} wait-off/bare req/s {med[0]:.2f}x   wait-on/bare req/s "
                  f"{med[1]:.2f}x   WAIT on/off req/s {med[2]:.2f}x   p99 {med[3]:.2f}x")
    finally:
        _stop_servers(procs, bare)
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _single_layout(opts: argparse.Namespace) -> None:
    """Bare vs the service on one redis-server (the default run)."""

    tmp = Path(tempfile.mkdtemp(prefix="action-bench-"))
    node = RedisNode(
        load_settings({}, state_dir=tmp, redis_port=_free_port(), redis_appendfsync="always")
    )
    node.start()
    procs: list[subprocess.Popen[bytes]] = []
    bare_port, svc_port = _free_port(), _free_port()
    bare = multiprocessing.get_context("spawn").Process(
        target=_serve_bare, args=(bare_port,), daemon=True
    )
    try:
        node.wait_ready()
        settings = load_settings({}, redis_url=node.settings.local_redis_url, action_token=TOKEN,
                                 action_apply_connections=opts.lanes, labels_forward=False)
        env = {**settings_environ(settings), "PYTHONPATH": str(ROOT)}
        svc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "app.cli.main", "action-service", "--port", str(svc_port)],
            env=env,
            cwd=ROOT,
        )
        procs.append(svc)
        bare.start()
        _wait_listening(svc_port, lambda: svc.poll() is None)
        _wait_listening(bare_port, bare.is_alive)
        ports = {"bare": bare_port, "service": svc_port}
        pids = {"bare": bare.pid, "service": svc.pid}
        warm = _actions("warm", 500)
        for port in ports.values():
            asyncio.run(_load(port, [[_request(port, a)] for a in warm], 8, 10))

        applied: list[Action] = list(warm)
        ratios: dict[int, list[tuple[float, float, float, float]]] = {}
        redis_pid = node.process.pid()
        for concurrency in (8, 32):
            print(f"concurrency {concurrency} (new keys), {opts.requests} requests per run")
            for rnd in range(opts.rounds):
                acts = _actions(f"c{concurrency}r{rnd}", opts.requests)
                order = ["bare", "service"] if rnd % 2 == 0 else ["service", "bare"]
                runs: dict[str, Run] = {}
                for name in order:
                    port = ports[name]
                    jobs = [[_request(port, a)] for a in acts]
                    spy = None
                    if name == "service" and concurrency == 32 and rnd == 0 and opts.py_spy:
                        spy = subprocess.Popen(  # noqa: S603
                            [_py_spy(), "record", "--native", "--format", "raw", "--rate", "250",
                             "--pid", str(svc.pid), "-o", opts.py_spy],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        )
                        time.sleep(1.0)  # let py-spy attach before the load starts
                    runs[name] = _measured(pids[name], lambda port=port, jobs=jobs, c=concurrency: asyncio.run(
                        _load(port, jobs, c, opts.max_seconds)), redis_pid)
                    if spy is not None:
                        spy.send_signal(signal.SIGINT)
                        spy.wait(timeout=60)
                applied.extend(acts)
                for name in ("bare", "service"):
                    print(_line(f"{name}", runs[name]))
                svc_run, bare_run = runs["service"], runs["bare"]
                pair = (
                    svc_run.rps / bare_run.rps,
                    svc_run.pct(99) / bare_run.pct(99),
                    svc_run.cpu_us / bare_run.cpu_us,
                    _ceiling(bare_run, svc_run),
                )
                print(f"  cpu per request: client {1e6 * bare_run.client_cpu_s / len(bare_run.latencies):.0f}"
                      f" / {1e6 * svc_run.client_cpu_s / len(svc_run.latencies):.0f} us, redis "
                      f"{1e6 * svc_run.redis_cpu_s / len(svc_run.latencies):.0f} us; whole system"
                      f" bare {bare_run.system_us:.0f} us, service {svc_run.system_us:.0f} us;"
                      f" cores busy bare {bare_run.system_us * bare_run.rps / 1e6:.2f}, service "
                      f"{svc_run.system_us * svc_run.rps / 1e6:.2f} of {os.cpu_count()}")
                ratios.setdefault(concurrency, []).append(pair)
                print(f"  round {rnd}: ratio service/bare req/s {pair[0]:.2f}x, p99 {pair[1]:.2f}x,"
                      f" cpu/req {pair[2]:.2f}x; CPU-bound ceiling {pair[3]:.2f}x")

        rng = random.Random(13)
        fresh = _actions("mixed", opts.requests)
        mixed: dict[str, Run] = {}
        for name in ("bare", "service"):
            rng.seed(13)
            jobs = _mixed_jobs(ports[name], fresh, applied, rng)
            mixed[name] = _measured(pids[name], lambda name=name, jobs=jobs: asyncio.run(
                _load(ports[name], jobs, 32, opts.max_seconds)))
        print("concurrency 32, mixed: 30 % replays, 5 % concurrent duplicates")
        for name in ("bare", "service"):
            print(_line(name, mixed[name]))
        mixed_ratio = (
            mixed["service"].rps / mixed["bare"].rps,
            mixed["service"].pct(99) / mixed["bare"].pct(99),
        )

        cpu = {"redis": _cpu_s(node.process.pid()), "service": _cpu_s(svc.pid),
               "bare": _cpu_s(bare.pid)}
        import redis as redis_client

        stats = redis_client.Redis.from_url(node.settings.local_redis_url).info("commandstats")
        evalsha = stats.get("cmdstat_evalsha", {})
        batches = _metric(svc_port, "action_service_apply_batch_size_count")
        batched = _metric(svc_port, "action_service_apply_batch_size_sum")
        rtt = _metric(svc_port, "action_service_redis_round_trip_seconds_sum")
        rtt_n = _metric(svc_port, "action_service_redis_round_trip_seconds_count")
        print("summary (median over rounds of service / bare in the same round)")
        for concurrency, pairs in ratios.items():
            print(
                f"  c={concurrency:<3d} req/s {statistics.median(p[0] for p in pairs):.2f}x"
                f"   p99 {statistics.median(p[1] for p in pairs):.2f}x"
                f"   cpu/req {statistics.median(p[2] for p in pairs):.2f}x"
                f"   CPU-bound ceiling {statistics.median(p[3] for p in pairs):.2f}x"
            )
        print(f"  mixed  req/s {mixed_ratio[0]:.2f}x   p99 {mixed_ratio[1]:.2f}x"
              f"   cpu/req {mixed['service'].cpu_us / mixed['bare'].cpu_us:.2f}x")
        if batches == batches and batches > 0:
            print(
                f"  service: {batches:.0f} script calls, mean batch {batched / batches:.2f}, "
                f"mean Redis round trip {1000 * rtt / max(rtt_n, 1):.2f} ms"
            )
        print(
            f"  CPU seconds over the whole run: redis {cpu['redis']:.1f}, service "
            f"{cpu['service']:.1f}, bare {cpu['bare']:.1f}; EVALSHA in Redis "
            f"{evalsha.get('usec_per_call', float('nan')):.0f} us per call"
        )
    finally:
        _stop_servers(procs, bare)
        node.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _stop_servers(procs: list[subprocess.Popen[bytes]], bare: multiprocessing.Process) -> None:
    """Stop the service processes and the bare server this run started (by their own handles)."""
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=20)
    if bare.is_alive():
        bare.terminate()
        bare.join(timeout=20)


if __name__ == "__main__":
    main()
