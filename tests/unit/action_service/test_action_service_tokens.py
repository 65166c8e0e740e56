"""Bearer tokens at the routes: two full-access tokens, a read-only one (403 on POST), no leaks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.action_service.app import create_app
from app.action_service.appkeys import METRICS
from app.security.tokens import service_tokens
from app.settings import load_settings

OLD, NEW, READER = "old-tok-Zq1", "new-tok-Xw2", "read-tok-Yv3"


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    # Redis on a closed port: these requests are answered before any Redis command.
    settings = load_settings({}, redis_url="redis://127.0.0.1:1/0",
                             action_token=f"{NEW},{OLD}", action_read_token=READER)
    app = create_app(settings, tokens=service_tokens(settings, "0.0.0.0"))
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_both_rotation_tokens_pass_on_post(client: TestClient):
    for token in (NEW, OLD):
        resp = await client.post("/v1/actions", data=b"{}", headers=_auth(token))
        assert resp.status == 400  # past the token check: the Idempotency-Key is missing
        assert (await resp.json())["field"] == "Idempotency-Key"


async def test_read_only_token_gets_403_on_post_and_passes_on_get(client: TestClient):
    resp = await client.post("/v1/actions", data=b"{}", headers=_auth(READER))
    assert resp.status == 403
    for path in ("/v1/actions/not-a-key", "/v1/cards/bad card"):
        resp = await client.get(path, headers=_auth(READER))
        assert resp.status == 422, path  # past the token check


@pytest.mark.parametrize("header", [None, "Bearer dev-token-change-me", "Bearer ", f"Basic {NEW}",
                                    f"Bearer {NEW}x"])
async def test_wrong_or_missing_token_is_401(client: TestClient, header: str | None):
    headers = {} if header is None else {"Authorization": header}
    for method, path in (("POST", "/v1/actions"), ("GET", "/v1/cards/c1")):
        resp = await client.request(method, path, headers=headers)
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")


async def test_no_token_in_error_bodies_or_metrics(client: TestClient):
    bodies = []
    for token in (NEW, READER, f"{NEW}x"):
        resp = await client.post("/v1/actions", data=b"{}", headers=_auth(token))
        bodies.append(await resp.text())
    metrics = await (await client.get("/metrics")).text()
    assert client.app is not None
    exposition = client.app[METRICS].exposition().decode()
    for text in (*bodies, metrics, exposition):
        for secret in (NEW, OLD, READER):
            assert secret not in text
