"""The list routes with an in-memory book: 200 once written, 4xx naming the field, 403 for a
read-only token, 503 when Kafka does not acknowledge, and nothing written on any refusal."""

from __future__ import annotations

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.action_service.app import create_app
from app.scoring.lists import EntityKind, ListEntry, Lists
from app.settings import load_settings


class _Fake:
    """A ListBook in memory; `down` makes every call fail as a Kafka timeout would."""

    def __init__(self) -> None:
        self.entries_by_key: dict[str, ListEntry] = {}
        self.down = False

    async def put(self, entry: ListEntry) -> None:
        if self.down:
            raise TimeoutError
        self.entries_by_key[entry.key] = entry

    async def remove(self, kind: EntityKind, entity_id: str) -> None:
        if self.down:
            raise TimeoutError
        self.entries_by_key.pop(f"{kind}:{entity_id}", None)

    async def entries(self) -> Lists:
        if self.down:
            raise TimeoutError
        return Lists.of(self.entries_by_key.values())

    async def aclose(self) -> None:
        pass


@pytest.fixture
async def client_and_book():
    book = _Fake()
    app = create_app(load_settings({}, action_token="alice:w-tok", action_read_token="r-tok"),
                     lists=book)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client, book
    finally:
        await client.close()


def _auth(token: str = "w-tok") -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_put_get_delete(client_and_book):
    client, book = client_and_book
    reply = await client.put("/v1/lists/card/c1", headers=_auth(),
                             data=orjson.dumps({"list": "block", "reason": "mule"}))
    assert reply.status == 200
    body = await reply.json()
    assert (body["list"], body["kind"], body["id"], body["by"]) == ("block", "card", "c1", "alice")
    reply = await client.get("/v1/lists", headers=_auth("r-tok"))
    assert [e["id"] for e in (await reply.json())["entries"]] == ["c1"]
    reply = await client.delete("/v1/lists/card/c1", headers=_auth())
    assert reply.status == 200 and (await reply.json())["removed"] is True
    assert book.entries_by_key == {}


@pytest.mark.parametrize(("method", "path", "body", "token", "status", "field"), [
    ("put", "/v1/lists/card/c1", {"list": "block", "reason": "x"}, "r-tok", 403, "Authorization"),
    ("put", "/v1/lists/card/c1", {"list": "block", "reason": "x"}, "nope", 401, "Authorization"),
    ("delete", "/v1/lists/card/c1", None, "r-tok", 403, "Authorization"),
    ("put", "/v1/lists/person/c1", {"list": "block", "reason": "x"}, "w-tok", 422, "kind"),
    ("put", "/v1/lists/card/c%201", {"list": "block", "reason": "x"}, "w-tok", 422, "id"),
    ("put", "/v1/lists/card/c1", {"list": "black", "reason": "x"}, "w-tok", 422, "list"),
    ("put", "/v1/lists/card/c1", {"list": "block"}, "w-tok", 422, "reason"),
    ("put", "/v1/lists/card/c1", {"list": "block", "reason": "x", "ttl": 1}, "w-tok", 422, "ttl"),
    ("put", "/v1/lists/card/c1", {"list": "block", "reason": "x" * 5000}, "w-tok", 413, None),
    ("delete", "/v1/lists/shop/c1", None, "w-tok", 422, "kind"),
])
async def test_refusals_name_the_field_and_write_nothing(client_and_book, method, path, body,
                                                          token, status, field):
    client, book = client_and_book
    data = orjson.dumps(body) if body is not None else None
    reply = await getattr(client, method)(path, headers=_auth(token), data=data)
    assert reply.status == status
    assert (await reply.json())["field"] == field
    assert book.entries_by_key == {}


async def test_kafka_down_is_503_and_nothing_is_written(client_and_book):
    client, book = client_and_book
    book.down = True
    for method, path in (("put", "/v1/lists/card/c1"), ("delete", "/v1/lists/card/c1"),
                         ("get", "/v1/lists")):
        reply = await getattr(client, method)(
            path, headers=_auth(), data=orjson.dumps({"list": "allow", "reason": "vip"}))
        assert reply.status == 503 and reply.headers["Retry-After"]
    assert book.entries_by_key == {}


async def test_other_methods_are_405_with_allow(client_and_book):
    client, _ = client_and_book
    reply = await client.post("/v1/lists/card/c1", headers=_auth())
    assert reply.status == 405 and reply.headers["Allow"] == "PUT, DELETE"
