"""HTTP handlers of the allow/block lists: GET /v1/lists, PUT and DELETE /v1/lists/{kind}/{id}.

The lists live on the compacted control topic (app.control), not in Redis: the workers
read them there, so a write is answered once Kafka has acknowledged it (all in-sync replicas)
and a read is what the workers read. Kafka down or slow: 503, nothing written (one record is
written whole or not at all), the same request may be retried.
"""

from __future__ import annotations

import logging
import time
from typing import Final, Protocol

from aiohttp import web

from app.action_service.replies import RETRY_AFTER_S, error_reply, json_reply
from app.scoring.lists import (
    EntityKind,
    ListEntry,
    ListEntryError,
    Lists,
    check_entity_id,
    check_kind,
    parse_request,
)

logger = logging.getLogger(__name__)

#: Largest list request body (a reason of at most 500 characters fits many times over).
MAX_LIST_BODY_BYTES: Final = 4 * 1024


class ListBook(Protocol):
    """Where list entries are written and read (app.control.publisher.ControlPublisher)."""

    async def put(self, entry: ListEntry) -> object: ...

    async def remove(self, kind: EntityKind, entity_id: str) -> object: ...

    async def entries(self) -> Lists: ...

    async def aclose(self) -> None: ...


LISTS = web.AppKey("lists", ListBook)


def _kafka_down(exc: BaseException) -> web.Response:
    logger.warning("list request not done: Kafka error=%s", type(exc).__name__)
    return error_reply(503, "Kafka did not acknowledge in time; nothing was written, retry",
                       None, {"Retry-After": str(RETRY_AFTER_S)})


def _kafka_errors() -> tuple[type[BaseException], ...]:
    from aiokafka.errors import KafkaError

    return (KafkaError, TimeoutError, OSError)


def _path(request: web.Request) -> tuple[EntityKind, str]:
    return (check_kind(request.match_info["kind"]),
            check_entity_id(request.match_info["entity_id"]))


async def get_lists(request: web.Request) -> web.Response:
    """Every current entry, by kind then id."""
    try:
        lists = await request.app[LISTS].entries()
    except _kafka_errors() as exc:
        return _kafka_down(exc)
    entries = sorted(lists.entries.values(), key=lambda e: (e.kind, e.id))
    return json_reply({"entries": [e.to_dict() for e in entries]})


async def put_entry(request: web.Request, by: str) -> web.Response:
    """Put the path's entity on the body's list (its previous entry, if any, is replaced)."""
    if request.content_length is not None and request.content_length > MAX_LIST_BODY_BYTES:
        return error_reply(413, f"body is over {MAX_LIST_BODY_BYTES} bytes", None)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return error_reply(413, f"body is over {MAX_LIST_BODY_BYTES} bytes", None)
    if len(raw) > MAX_LIST_BODY_BYTES:
        return error_reply(413, f"body is over {MAX_LIST_BODY_BYTES} bytes", None)
    try:
        entry = parse_request(request.match_info["kind"], request.match_info["entity_id"], raw,
                              by=by, at_ms=time.time_ns() // 1_000_000)
    except ListEntryError as exc:
        return error_reply(422, exc.reason, exc.field)
    try:
        await request.app[LISTS].put(entry)
    except _kafka_errors() as exc:
        return _kafka_down(exc)
    logger.info("list entry put list=%s kind=%s by=%s", entry.list, entry.kind, by)
    return json_reply(entry.to_dict())


async def delete_entry(request: web.Request, by: str) -> web.Response:
    """Take the path's entity off the lists (idempotent: absent already is fine)."""
    try:
        kind, entity_id = _path(request)
    except ListEntryError as exc:
        return error_reply(422, exc.reason, exc.field)
    try:
        await request.app[LISTS].remove(kind, entity_id)
    except _kafka_errors() as exc:
        return _kafka_down(exc)
    logger.info("list entry removed kind=%s by=%s", kind, by)
    return json_reply({"kind": kind, "id": entity_id, "removed": True})
