"""The OpenAPI 3.0 description of the action service, served at /openapi.json."""

from __future__ import annotations

from typing import Any, Final

from app.action_service.openapi_lists import list_paths, list_schemas
from app.action_service.openapi_rules import rule_paths, rule_schemas
from app.actions.action import DECIDED_BY, MAX_TS_MS, OPTIONAL_FIELDS
from app.ids import ID_ANCHORED, ID_PATTERN
from app.transactions.contract import MIN_TS_MS

_ID: Final = {
    "type": "string",
    "pattern": ID_ANCHORED,
    "minLength": 1,
    "maxLength": 64,
}
_KEY: Final = {"type": "string", "pattern": "^[0-9a-f]{32}$", "minLength": 32, "maxLength": 32}
_DECISION_KEY: Final = {"type": "string", "pattern": ID_ANCHORED,
                        "minLength": 1, "maxLength": 64}
_TS: Final = {"type": "integer", "format": "int64", "minimum": MIN_TS_MS, "maximum": MAX_TS_MS}
_MS: Final = {"type": "integer", "format": "int64"}
_JSON: Final = "application/json"
_DECIDED_BY: Final = {"type": "string", "enum": list(DECIDED_BY)}
_RULE: Final = {"type": "string", "pattern": f"^((allow|block):(card|merchant):{ID_PATTERN}"
                                              "|[a-z0-9][a-z0-9_-]{0,63}@[1-9][0-9]{0,8})$"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {_JSON: {"schema": _ref("Error")}},
    }
    if headers:
        response["headers"] = headers
    return response


def _ok(description: str, schema: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {_JSON: {"schema": _ref(schema)}},
    }
    if headers:
        response["headers"] = headers
    return response


_RETRY_AFTER: Final = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "string"}}
}
_UNAUTHORIZED: Final = {
    "WWW-Authenticate": {"description": "Bearer challenge.", "schema": {"type": "string"}}
}


def _schemas() -> dict[str, Any]:
    action_fields = {
        "idempotency_key": {**_KEY, "description": "idempotency_key(type, txn_id), see docs."},
        "type": {"type": "string", "enum": ["freeze_card", "alert_customer", "review"]},
        "card_id": _ID,
        "txn_id": _ID,
        "ts_ms": {**_TS, "description": "Event time of the transaction (ms since epoch)."},
        "score": {"type": "number", "description": "The model's score."},
        "model_version": {
            "type": "string",
            "pattern": "^[ -~]{1,128}$",
            "minLength": 1,
            "maxLength": 128,
        },
        "decided_at_ms": {**_TS, "description": "Wall clock at decision (ms since epoch)."},
        "explanation": {"type": "array", "minItems": 1, "maxItems": 20,
                        "items": _ref("Contribution"),
                        "description": "Optional: the top contributing features (occlusion "
                        "against the training reference); not part of the action's identity."},
        "decided_by": {**_DECIDED_BY, "description": "Who decided: the model, an allow/"
                       "block list entry or a rule (then `rule` names it). Absent: model. Not "
                       "part of the action's identity."},
        "rule": {**_RULE, "description": "The list entry (`<list>:<kind>:<id>`, with decided_by "
                 "allow_list or block_list) or the rule version (`<id>@<version>`, with "
                 "decided_by rule) that decided."},
    }
    explanation = {"type": "array", "items": _ref("Contribution"), "nullable": True,
                   "description": "Top contributing features, largest |contribution| first."}
    decider = {"decided_by": {**_DECIDED_BY, "description": "Who decided it (allow_list: "
                              "the model's freeze was downgraded to this alert)."},
               "rule": {**_RULE, "nullable": True}}
    result_fields = {
        "idempotency_key": _KEY,
        "type": {"type": "string", "enum": ["freeze_card", "alert_customer", "review"]},
        "card_id": _ID,
        "txn_id": _ID,
        "ts_ms": _MS,
        "outcome": {"type": "string", "enum": ["frozen", "already_frozen",
                                               "superseded_by_release", "alert_queued",
                                               "review_queued"]},
        "applied_at_ms": _MS,
        "effect_id": {"type": "string", "description": "ID of the entry in the `effects` stream."},
    }
    alert_fields = {
        "alert_id": {"type": "string", "description": "ID of the entry in the `alerts` stream."},
        "txn_id": _ID,
        "idempotency_key": _KEY,
        "ts_ms": _MS,
        "score": {"type": "number"},
        "model_version": {"type": "string"},
        "queued_at_ms": _MS,
        "explanation": explanation,
        **decider,
    }
    return {
        "Action": {**_object(action_fields, "An action, exactly the actions contract."),
                   "required": [name for name in action_fields if name not in OPTIONAL_FIELDS]},
        "Contribution": _object(
            {
                "name": {"type": "string", "pattern": "^[a-z0-9_]{1,64}$"},
                "value": {"type": "number", "description": "The feature's value as served."},
                "contribution": {"type": "number", "description": "score minus the score with "
                                 "this feature at its training reference."},
            },
            "One feature of an explanation.",
        ),
        "ActionResult": _object(result_fields, "What applying the action did (stored, replayed)."),
        "ActionRecord": _object(
            {
                "idempotency_key": _KEY,
                "status": {"type": "integer", "enum": [201]},
                "result": _ref("ActionResult"),
                "fingerprint": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "score": {"type": "number"},
                "model_version": {"type": "string"},
                "decided_at_ms": _MS,
                "expires_in_ms": {"type": "integer", "minimum": 0},
                "explanation": explanation,
                **decider,
            },
            "The stored record of an applied key (score/model/decided_at of the applying request).",
        ),
        "Alert": _object(alert_fields, "One queued customer alert."),
        "Card": _object(
            {
                "card_id": _ID,
                "status": {"type": "string", "enum": ["active", "frozen"]},
                "frozen_at_ms": {**_MS, "nullable": True},
                "reason": {"type": "string", "nullable": True},
                "txn_id": {**_ID, "nullable": True},
                "explanation": explanation,
                "decided_by": {**_DECIDED_BY, "nullable": True,
                               "description": "Who froze it (model or block_list)."},
                "rule": {**_RULE, "nullable": True},
                "released_at_ms": {**_MS, "nullable": True,
                                   "description": "When an analyst last released the card."},
                "released_by": {"type": "string", "nullable": True},
                "confirmed_fraud": {"type": "boolean",
                                    "description": "An analyst confirmed fraud on the card."},
                "alerts_total": {"type": "integer", "minimum": 0},
                "alerts": {"type": "array", "items": _ref("Alert")},
                "history": {"type": "array", "items": _ref("CardEvent"),
                            "description": "Newest status events, oldest first."},
            },
            "A card's status; a card never acted on is active with no alerts.",
        ),
        "CardEvent": _object(
            {
                "event": {"type": "string", "enum": ["frozen", "released", "confirmed"]},
                "at_ms": _MS,
                "by": {"type": "string", "description": "`model <version>`, `block_list <rule>` "
                       "or the token's name."},
                "reason": {"type": "string"},
                "txn_id": {**_ID, "nullable": True},
                "idempotency_key": {"type": "string"},
                "effect_id": {"type": "string", "description": "Its `effects` entry."},
            },
            "One change of a card's status (a freeze, an analyst's release or confirmation).",
        ),
        "DecisionBody": {
            "type": "object",
            "required": ["reason"],
            "additionalProperties": False,
            "properties": {
                "reason": {"type": "string", "minLength": 1, "maxLength": 500},
                "txn_id": {**_ID, "description": "confirm only: the fraudulent transaction "
                           "(default: the card's last frozen transaction)."},
            },
            "description": "Why (release: `reason` only; confirm: `reason`, optional `txn_id`).",
        },
        "DecisionResult": _object(
            {
                "idempotency_key": _DECISION_KEY,
                "decision": {"type": "string", "enum": ["release", "confirm"]},
                "card_id": _ID,
                "outcome": {"type": "string", "enum": ["released", "not_frozen", "confirmed"]},
                "txn_id": {**_ID, "nullable": True},
                "reason": {"type": "string"},
                "by": {"type": "string", "description": "The name of the token that decided."},
                "applied_at_ms": _MS,
                "effect_id": {"type": "string", "description": "Its `effects` entry."},
            },
            "What the decision did (the same body on every replay).",
        ),
        **list_schemas(_object),
        **rule_schemas(_object),
        "Error": _object(
            {
                "error": {"type": "string"},
                "field": {"type": "string", "nullable": True},
            },
            "Every error: a readable reason and the offending field (or null).",
        ),
        "Health": _object({"status": {"type": "string", "enum": ["ok"]}}, "Liveness."),
        "Ready": {
            "type": "object",
            "required": ["status"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "enum": ["ready", "unavailable"]},
                "error": {"type": "string"},
            },
        },
    }


def _object(properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": list(properties),
        "additionalProperties": False,
        "properties": properties,
    }


def _paths() -> dict[str, Any]:
    secured = [{"bearerAuth": []}]
    unauthorized = _error("Missing or wrong bearer token.", _UNAUTHORIZED)
    unavailable = _error("Redis is unreachable; retry (the key makes it safe).", _RETRY_AFTER)
    invalid = _error("Invalid input; `field` names it.")
    return {
        "/v1/actions": {
            "post": {
                "operationId": "postAction",
                "summary": "Apply an action once per idempotency key.",
                "security": secured,
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": True,
                        "description": "Must equal the body's idempotency_key.",
                        "schema": _KEY,
                    }
                ],
                "requestBody": {"required": True, "content": {_JSON: {"schema": _ref("Action")}}},
                "responses": {
                    "201": _ok(
                        "New key: effect applied and key recorded atomically.",
                        "ActionResult",
                        {
                            "Location": {
                                "description": "The key's record.",
                                "schema": {"type": "string"},
                            }
                        },
                    ),
                    "200": _ok(
                        "Known key, same action: the stored result, no second effect.",
                        "ActionResult",
                        {
                            "Idempotent-Replayed": {
                                "description": "Always `true` on a replay.",
                                "schema": {"type": "string", "enum": ["true"]},
                            }
                        },
                    ),
                    "400": _error("The Idempotency-Key header is missing."),
                    "401": unauthorized,
                    "403": _error("The token is read-only (FRAUDSTREAM_ACTION_READ_TOKEN)."),
                    "409": _error("A request with the same key is in flight in this process."),
                    "410": _error("Unknown key and decided_at_ms older than TTL minus margin."),
                    "413": _error("Body over 64 KiB."),
                    "422": invalid,
                    "503": unavailable,
                },
            }
        },
        "/v1/actions/{idempotency_key}": {
            "get": {
                "operationId": "getAction",
                "summary": "The stored record of an idempotency key.",
                "security": secured,
                "parameters": [
                    {"name": "idempotency_key", "in": "path", "required": True, "schema": _KEY}
                ],
                "responses": {
                    "200": _ok("The record.", "ActionRecord"),
                    "401": unauthorized,
                    "404": _error("Unknown or expired key."),
                    "422": invalid,
                    "503": unavailable,
                },
            }
        },
        "/v1/cards/{card_id}": {
            "get": {
                "operationId": "getCard",
                "summary": "A card's status, freeze reason and alerts.",
                "security": secured,
                "parameters": [{"name": "card_id", "in": "path", "required": True, "schema": _ID}],
                "responses": {
                    "200": _ok("The card.", "Card"),
                    "401": unauthorized,
                    "422": invalid,
                    "503": unavailable,
                },
            }
        },
        "/v1/cards/{card_id}/release": _decision_path(
            "releaseCard", "Unfreeze a card (an analyst's decision; labels its freeze 0).",
            unauthorized, unavailable, invalid),
        "/v1/cards/{card_id}/confirm": _decision_path(
            "confirmCard", "Confirm fraud on a card (an analyst's decision; labels it 1).",
            unauthorized, unavailable, invalid),
        **list_paths(_ok, _error, unauthorized, invalid, _RETRY_AFTER),
        **rule_paths(_ok, _error, unauthorized, invalid, _RETRY_AFTER),
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness.",
                "responses": {"200": _ok("Serving.", "Health")},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: Redis answers PING.",
                "responses": {
                    "200": _ok("Ready.", "Ready"),
                    "503": {
                        "description": "Redis unreachable.",
                        "headers": _RETRY_AFTER,
                        "content": {_JSON: {"schema": _ref("Ready")}},
                    },
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics.",
                "responses": {
                    "200": {
                        "description": "Prometheus text exposition format 0.0.4.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document.",
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.0 document.",
                        "content": {_JSON: {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }


def _decision_path(operation: str, summary: str, unauthorized: dict[str, Any],
                   unavailable: dict[str, Any], invalid: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation,
            "summary": summary,
            "security": [{"bearerAuth": []}],
            "parameters": [
                {"name": "card_id", "in": "path", "required": True, "schema": _ID},
                {"name": "Idempotency-Key", "in": "header", "required": True,
                 "description": "Chosen by the client; scoped to the card.",
                 "schema": _DECISION_KEY},
            ],
            "requestBody": {"required": True,
                            "content": {_JSON: {"schema": _ref("DecisionBody")}}},
            "responses": {
                "201": _ok("New key: decision applied, recorded with its ledger entry and label "
                           "atomically.", "DecisionResult"),
                "200": _ok("Known key, same decision: the stored result, no second effect.",
                           "DecisionResult", {"Idempotent-Replayed": {
                               "description": "Always `true` on a replay.",
                               "schema": {"type": "string", "enum": ["true"]}}}),
                "400": _error("The Idempotency-Key header is missing."),
                "401": unauthorized,
                "403": _error("The token is read-only (FRAUDSTREAM_ACTION_READ_TOKEN)."),
                "409": _error("A request with the same key is in flight in this process."),
                "413": _error("Body over 64 KiB."),
                "422": invalid,
                "503": unavailable,
            },
        }
    }


def build_openapi() -> dict[str, Any]:
    """A fresh OpenAPI 3.0.3 document describing every route, status and body."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "fraudstream action service",
            "version": "1.0.0",
            "description": "Applies freeze_card / alert_customer actions exactly once per "
            "idempotency key (Redis + one Lua script). See docs/action-service.md.",
        },
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
