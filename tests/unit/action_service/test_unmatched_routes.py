"""Requests no route answers: JSON 404, or 405 with Allow on a known path, counted (no network)."""

from __future__ import annotations

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from aiohttp.web_urldispatcher import MatchInfoError

from app.action_service.app import create_app
from app.action_service.appkeys import METRICS
from app.settings import load_settings


async def _answer(app: web.Application, method: str, path: str) -> web.Response:
    request = make_mocked_request(method, path, app=app)
    match_info = await app.router.resolve(request)
    assert not isinstance(match_info, MatchInfoError)  # every request has a handler
    response = await match_info.handler(request)
    assert isinstance(response, web.Response)
    return response


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("DELETE", "/v1/actions", 405, "POST"),
        ("GET", "/v1/actions", 405, "POST"),
        ("HEAD", "/healthz", 405, "GET"),
        ("POST", "/v1/cards/c-1", 405, "GET"),
        ("GET", "/v2/nothing", 404, None),
        ("GET", "/v1/cards/", 404, None),
        ("GET", "/v1/cards/a/b", 404, None),
        ("GET", "/a%0Ab", 404, None),
        ("BREW", "/", 404, None),
    ],
)
async def test_unmatched_requests_get_the_json_error_shape(method, path, status, allow):
    app = create_app(load_settings({}, action_token="t"))
    response = await _answer(app, method, path)
    assert response.status == status
    assert response.headers.get("Allow") == allow
    assert response.content_type == "application/json"
    reason = "Method Not Allowed" if status == 405 else "Not Found"
    assert orjson.loads(response.body) == {"error": reason, "field": None}
    label = method if method != "BREW" else "OTHER"
    text = app[METRICS].exposition().decode()
    assert (f'action_service_requests_total{{method="{label}",route="unmatched",'
            f'status="{status}"}} 1.0') in text


async def test_known_routes_still_reach_their_handlers():
    app = create_app(load_settings({}, action_token="t"))
    response = await _answer(app, "GET", "/healthz")
    assert response.status == 200
    assert orjson.loads(response.body) == {"status": "ok"}
