"""The allow/block list routes' part of the OpenAPI document: its schemas and paths, built with
the helpers of app.action_service.openapi (passed in: that module imports this one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from app.action_service.list_routes import MAX_LIST_BODY_BYTES
from app.ids import ID_ANCHORED

_ID: Final = {
    "type": "string",
    "pattern": ID_ANCHORED,
    "minLength": 1,
    "maxLength": 64,
}
_MS: Final = {"type": "integer", "format": "int64"}
_JSON: Final = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def list_schemas(obj: Callable[[dict[str, Any], str], dict[str, Any]]) -> dict[str, Any]:
    """ListEntry, ListBody, Lists, ListRemoval."""
    return {
        "ListEntry": obj(
            {
                "list": {"type": "string", "enum": ["allow", "block"]},
                "kind": {"type": "string", "enum": ["card", "merchant"]},
                "id": _ID,
                "reason": {"type": "string", "minLength": 1, "maxLength": 500},
                "by": {"type": "string", "description": "The name of the token that put it."},
                "at_ms": _MS,
            },
            "An entity on a list (allow: a model freeze becomes an alert; block: its next "
            "transaction freezes the card). An entity is on one list at most.",
        ),
        "ListBody": {
            "type": "object",
            "required": ["list", "reason"],
            "additionalProperties": False,
            "properties": {
                "list": {"type": "string", "enum": ["allow", "block"]},
                "reason": {"type": "string", "minLength": 1, "maxLength": 500},
            },
            "description": "Which list and why.",
        },
        "Lists": obj({"entries": {"type": "array", "items": _ref("ListEntry")}},
                         "Every current entry, ordered by kind and id."),
        "ListRemoval": obj({"kind": {"type": "string", "enum": ["card", "merchant"]},
                                "id": _ID, "removed": {"type": "boolean", "enum": [True]}},
                               "The entity is on no list any more."),
    }


def list_paths(ok: Callable[..., dict[str, Any]], error: Callable[..., dict[str, Any]],
               unauthorized: dict[str, Any], invalid: dict[str, Any],
               retry_after: dict[str, Any]) -> dict[str, Any]:
    """GET /v1/lists, PUT and DELETE /v1/lists/{kind}/{entity_id}."""
    secured = [{"bearerAuth": []}]
    kafka_down = error("Kafka did not acknowledge or answer in time; nothing was written, "
                        "retry.", retry_after)
    list_params = [
        {"name": "kind", "in": "path", "required": True,
         "schema": {"type": "string", "enum": ["card", "merchant"]}},
        {"name": "entity_id", "in": "path", "required": True, "schema": _ID},
    ]
    return {
        "/v1/lists": {
            "get": {
                "operationId": "getLists",
                "summary": "Every allow/block list entry (read from the control topic).",
                "security": secured,
                "responses": {
                    "200": ok("The entries.", "Lists"),
                    "401": unauthorized,
                    "503": kafka_down,
                },
            }
        },
        "/v1/lists/{kind}/{entity_id}": {
            "put": {
                "operationId": "putListEntry",
                "summary": "Put a card or merchant on the allow or block list (replacing its "
                           "entry); every worker applies it from its next batch.",
                "security": secured,
                "parameters": list_params,
                "requestBody": {"required": True,
                                "content": {_JSON: {"schema": _ref("ListBody")}}},
                "responses": {
                    "200": ok("Acknowledged by Kafka (all in-sync replicas).", "ListEntry"),
                    "401": unauthorized,
                    "403": error("The token is read-only (FRAUDSTREAM_ACTION_READ_TOKEN)."),
                    "413": error(f"Body over {MAX_LIST_BODY_BYTES} bytes."),
                    "422": invalid,
                    "503": kafka_down,
                },
            },
            "delete": {
                "operationId": "deleteListEntry",
                "summary": "Take a card or merchant off the lists (idempotent).",
                "security": secured,
                "parameters": list_params,
                "responses": {
                    "200": ok("Acknowledged by Kafka.", "ListRemoval"),
                    "401": unauthorized,
                    "403": error("The token is read-only (FRAUDSTREAM_ACTION_READ_TOKEN)."),
                    "422": invalid,
                    "503": kafka_down,
                },
            },
        },
    }
