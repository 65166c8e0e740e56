"""What the live tests share: the types of the fixtures that start processes, the action
service's API, the CLI as a child process, /metrics pages and the offline oracle."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from app.harness.procs import Spawned, settings_env
from app.scoring.oracle import OracleRun, run_oracle
from app.scoring.registry import ModelRegistry
from app.settings import Settings


class StartWorker(Protocol):
    """The `start_worker` fixture (tests/integration/conftest.py)."""

    def __call__(self, settings: Settings, *, name: str = ..., dispatch: bool = ...,
                 args: Sequence[str] = ..., port: int | None = ...) -> Spawned: ...


class StartActionService(Protocol):
    """The `start_action_service` fixture (tests/integration/conftest.py)."""

    def __call__(self, settings: Settings, *, port: int | None = ...) -> Spawned: ...


#: The `start_quality` fixture (tests/integration/conftest.py).
StartQuality = Callable[[Settings], Spawned]

#: The action service's tokens in the analyst tests: alice may write, a viewer may only read.
WRITE, READ = "tok-analyst", "tok-viewer"


def with_analysts(settings: Settings) -> Settings:
    """`settings` whose action service takes WRITE (alice) and READ (viewer)."""
    return settings.replace(action_token=f"alice:{WRITE}", action_read_token=f"viewer:{READ}")


def api_request(settings: Settings, method: str, path: str, *, token: str = WRITE,
                key: str | None = None, body: Any = None,
                timeout_s: float = 30) -> tuple[int, dict[str, str], Any]:
    """One request to the action service: its status, headers and JSON body. `body` goes as
    JSON (bytes as they are), `key` as the Idempotency-Key."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    data = (body if isinstance(body, bytes) else json.dumps(body).encode()
            ) if body is not None else None
    request = urllib.request.Request(f"{settings.action_service_url}{path}", data=data,
                                     headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def api_call(settings: Settings, method: str, path: str, **request: Any) -> tuple[int, Any]:
    """`api_request`'s status and JSON body."""
    status, _, body = api_request(settings, method, path, **request)
    return status, body


def run_cli(settings: Settings, *args: str, timeout_s: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`fraudstream ARGS` in a child process that loads `settings` (`env`: more variables);
    its output captured as text, its exit status not checked."""
    return subprocess.run([sys.executable, "-m", "app.cli.main", *args],
                          env={**settings_env(settings), **(env or {})}, capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def metrics_page(port: int, *, timeout_s: float = 10) -> str:
    """The /metrics page of the process listening on loopback `port`."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback
        return resp.read().decode()


def metric_values(port: int, pattern: str) -> dict[str, float]:
    """{first group: second group as a float} for every line of `port`'s /metrics page that
    `pattern` matches (multiline); {} while the page does not answer."""
    try:
        text = metrics_page(port, timeout_s=5)
    except OSError:
        return {}
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.M)}


def offline_run(settings: Settings, lines: Sequence[bytes], *, now_ms: int,
                **options: Any) -> OracleRun:
    """`fraudstream score` in-process over `lines` with the settings' model and lateness, no
    explanations (`options`: run_oracle's, such as lists, rules, merchants, extra)."""
    registry = ModelRegistry(settings.model_dir, device="cpu")
    return run_oracle(lines, registry, version=settings.model_version, explain=False,
                      allowed_lateness_ms=settings.allowed_lateness_ms, now_ms=now_ms, **options)
