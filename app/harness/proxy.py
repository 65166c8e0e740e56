"""A fault-injecting HTTP proxy in front of the action service, switched from the test."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

import aiohttp
from aiohttp import web

Mode = Literal["pass", "503", "stall"]


class FaultProxy:
    """Forwards every request to `upstream`, or answers 503, or holds requests unanswered.

    It runs its own event loop in a daemon thread, on a loopback port, so a test can flip its
    mode while the dispatcher under test keeps talking to it.
    """

    def __init__(self, upstream: str, port: int) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = port
        self.mode: Mode = "pass"
        self.refused = 0
        self.stalled = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._runner: web.AppRunner | None = None
        self._release = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")

    def set_mode(self, mode: Mode) -> None:
        """Switch behaviour; leaving "stall" releases the held requests (they then forward)."""
        def apply() -> None:
            self.mode = mode
            if mode == "stall":
                self._release.clear()
            else:
                self._release.set()

        self._loop.call_soon_threadsafe(apply)

    def stop(self) -> None:
        async def shutdown() -> None:
            self._release.set()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self) -> None:
        session = aiohttp.ClientSession()

        async def forward(request: web.Request) -> web.StreamResponse:
            if self.mode == "503":
                self.refused += 1
                return web.Response(status=503, headers={"Retry-After": "1"}, text="injected")
            if self.mode == "stall":
                self.stalled += 1
                await self._release.wait()
            body = await request.read()
            headers = {k: v for k, v in request.headers.items()
                       if k.lower() not in ("host", "content-length")}
            async with session.request(request.method, self.upstream + request.path_qs,
                                       data=body, headers=headers) as resp:
                payload = await resp.read()
                out = {k: v for k, v in resp.headers.items()
                       if k.lower() in ("content-type", "idempotent-replayed", "retry-after")}
                return web.Response(status=resp.status, body=payload, headers=out)

        async def close_session(_app: web.Application) -> None:
            await session.close()

        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", forward)
        app.on_cleanup.append(close_session)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self._release.set()
