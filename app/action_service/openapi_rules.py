"""The rules' and the review queue's part of the OpenAPI document (schemas and paths), built
with the helpers of app.action_service.openapi (passed in: that module imports this one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from app.action_service.reviews import MAX_LIMIT
from app.action_service.rule_routes import MAX_RULE_BODY_BYTES
from app.ids import ID_ANCHORED
from app.rules.rule import RULE_ACTIONS, RULE_MODES

_MS: Final = {"type": "integer", "format": "int64"}
_JSON: Final = "application/json"
_RULE_ID: Final = {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"}
_REVIEW_ID: Final = {"type": "string", "pattern": "^[0-9]{1,2}-[0-9]{1,20}-[0-9]{1,20}$"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def rule_schemas(obj: Callable[[dict[str, Any], str], dict[str, Any]]) -> dict[str, Any]:
    """Rule, RuleBody, RulePatch, Rules, RuleHistory, RuleError, Review, Reviews, ReviewClose,
    ReviewCloseBody."""
    fields = {
        "id": _RULE_ID,
        "expression": {"type": "string", "maxLength": 2000,
                       "description": "The rule language (docs/rules.md)."},
        "action": {"type": "string", "enum": list(RULE_ACTIONS)},
        "mode": {"type": "string", "enum": list(RULE_MODES)},
        "owner": {"type": "string", "minLength": 1, "maxLength": 500},
        "reason": {"type": "string", "minLength": 1, "maxLength": 500},
        "order": {"type": "integer", "minimum": 0, "maximum": 1000000},
    }
    rule = obj({**fields, "version": {"type": "integer", "minimum": 1},
                "author": {"type": "string"}, "at_ms": _MS},
               "One immutable version of a rule; actions it decides name `<id>@<version>`.")
    written = dict(rule, required=[*rule["required"]],
                   properties={**rule["properties"], "control_offset": _MS})
    written["required"].append("control_offset")
    return {
        "Rule": rule,
        "RuleWritten": written,
        "RuleBody": {"type": "object", "additionalProperties": False,
                     "required": ["id", "expression", "action", "owner", "reason"],
                     "properties": fields, "description": "A new rule (mode: active)."},
        "RulePatch": {"type": "object", "additionalProperties": False, "minProperties": 1,
                      "properties": {k: v for k, v in fields.items() if k != "id"},
                      "description": "The fields the next version changes."},
        "Rules": obj({"rules": {"type": "array", "items": _ref("Rule")}},
                     "Every rule's current version, in evaluation order."),
        "RuleHistory": obj({"rule": _ref("Rule"),
                            "history": {"type": "array", "items": _ref("Rule")}},
                           "The current version and every version, oldest first."),
        "RuleError": {"type": "object", "required": ["error", "field"],
                      "properties": {
                          "error": {"type": "string"},
                          "rule": {"type": "string", "nullable": True},
                          "field": {"type": "string", "nullable": True},
                          "position": {"type": "object", "properties": {
                              "line": {"type": "integer"}, "column": {"type": "integer"}}}},
                      "description": "Why a rule was refused; for its expression, where."},
        "Review": {"type": "object", "additionalProperties": True,
                   "required": ["id", "status", "card_id", "txn_id", "score", "queued_at_ms"],
                   "properties": {"id": _REVIEW_ID,
                                  "status": {"type": "string", "enum": ["open", "closed"]},
                                  "card_id": {"type": "string"}, "txn_id": {"type": "string"},
                                  "score": {"type": "number"}, "queued_at_ms": _MS,
                                  "rule": {"type": "string", "nullable": True}},
                   "description": "A transaction sent to review, with its card, score, rule, "
                                  "explanation and (closed) how it was closed."},
        "Reviews": obj({"reviews": {"type": "array", "items": _ref("Review")},
                        "open": {"type": "integer"},
                        "oldest_queued_at_ms": {**_MS, "nullable": True}},
                       "The oldest open reviews, the queue's depth, the oldest one's time."),
        "ReviewCloseBody": {"type": "object", "additionalProperties": False,
                            "required": ["outcome"],
                            "properties": {"outcome": {"type": "string",
                                                       "enum": ["fraud", "legitimate"]},
                                           "reason": {"type": "string", "maxLength": 500}},
                            "description": "fraud: label 1, the card frozen; legitimate: label "
                                           "0, a card frozen for this transaction released."},
        "ReviewClose": {"type": "object", "additionalProperties": True,
                        "required": ["review_id", "outcome", "card", "closed_at_ms"],
                        "properties": {"review_id": _REVIEW_ID,
                                       "outcome": {"type": "string"},
                                       "card": {"type": "string", "enum": [
                                           "frozen", "already_frozen", "released",
                                           "unchanged"]},
                                       "closed_at_ms": _MS},
                        "description": "How the review was closed."},
    }


def rule_paths(ok: Callable[..., dict[str, Any]], error: Callable[..., dict[str, Any]],
               unauthorized: dict[str, Any], invalid: dict[str, Any],
               retry_after: dict[str, Any]) -> dict[str, Any]:
    """/v1/rules, /v1/rules/{rule_id}, /v1/reviews, /v1/reviews/{review_id}(/close)."""
    secured = [{"bearerAuth": []}]
    kafka_down = error("Kafka did not acknowledge or answer in time; nothing was written, "
                       "retry.", retry_after)
    forbidden = error("The token is read-only (FRAUDSTREAM_ACTION_READ_TOKEN).")
    refused = {"description": "The rule does not parse or type-check: nothing written.",
               "content": {_JSON: {"schema": _ref("RuleError")}}}
    rule_id = [{"name": "rule_id", "in": "path", "required": True, "schema": _RULE_ID}]
    review_id = [{"name": "review_id", "in": "path", "required": True, "schema": _REVIEW_ID}]
    redis_down = error("Redis is unreachable; retry.", retry_after)
    return {
        "/v1/rules": {
            "get": {"operationId": "getRules", "summary": "Every rule's current version.",
                    "security": secured,
                    "responses": {"200": ok("The rules.", "Rules"), "401": unauthorized,
                                  "503": kafka_down}},
            "post": {"operationId": "postRule",
                     "summary": "Write a new rule (version 1); every worker applies it from "
                                "its control offset on.",
                     "security": secured,
                     "requestBody": {"required": True,
                                     "content": {_JSON: {"schema": _ref("RuleBody")}}},
                     "responses": {"201": ok("Acknowledged by Kafka.", "RuleWritten"),
                                   "401": unauthorized, "403": forbidden,
                                   "409": error("The id exists: PATCH writes its next version."),
                                   "413": error(f"Body over {MAX_RULE_BODY_BYTES} bytes."),
                                   "422": refused, "503": kafka_down}},
        },
        "/v1/rules/{rule_id}": {
            "get": {"operationId": "getRule", "summary": "A rule and its history.",
                    "security": secured, "parameters": rule_id,
                    "responses": {"200": ok("The rule.", "RuleHistory"), "401": unauthorized,
                                  "404": error("No such rule."), "422": invalid,
                                  "503": kafka_down}},
            "patch": {"operationId": "patchRule",
                      "summary": "Write the rule's next version (mode disabled turns it off).",
                      "security": secured, "parameters": rule_id,
                      "requestBody": {"required": True,
                                      "content": {_JSON: {"schema": _ref("RulePatch")}}},
                      "responses": {"200": ok("Acknowledged by Kafka.", "RuleWritten"),
                                    "401": unauthorized, "403": forbidden,
                                    "404": error("No such rule."),
                                    "413": error(f"Body over {MAX_RULE_BODY_BYTES} bytes."),
                                    "422": refused, "503": kafka_down}},
        },
        "/v1/reviews": {
            "get": {"operationId": "getReviews", "summary": "The open reviews, oldest first.",
                    "security": secured,
                    "parameters": [
                        {"name": "status", "in": "query", "required": False,
                         "schema": {"type": "string", "enum": ["open"]}},
                        {"name": "limit", "in": "query", "required": False,
                         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}}],
                    "responses": {"200": ok("The open reviews.", "Reviews"),
                                  "401": unauthorized, "422": invalid, "503": redis_down}},
        },
        "/v1/reviews/{review_id}": {
            "get": {"operationId": "getReview", "summary": "One review, open or closed.",
                    "security": secured, "parameters": review_id,
                    "responses": {"200": ok("The review.", "Review"), "401": unauthorized,
                                  "404": error("No such review."), "422": invalid,
                                  "503": redis_down}},
        },
        "/v1/reviews/{review_id}/close": {
            "post": {"operationId": "closeReview",
                     "summary": "Close a review as fraud or legitimate, once per "
                                "Idempotency-Key; it writes the transaction's label.",
                     "security": secured,
                     "parameters": [*review_id,
                                    {"name": "Idempotency-Key", "in": "header",
                                     "required": True,
                                     "schema": {"type": "string",
                                                "pattern": ID_ANCHORED}}],
                     "requestBody": {"required": True,
                                     "content": {_JSON: {"schema": _ref("ReviewCloseBody")}}},
                     "responses": {"201": ok("Closed.", "ReviewClose"),
                                   "200": ok("A replay: the same key and body.", "ReviewClose"),
                                   "400": error("No Idempotency-Key."),
                                   "401": unauthorized, "403": forbidden,
                                   "404": error("No such review."),
                                   "409": error("Closed before under another key or body, or "
                                                "being closed now."),
                                   "413": error("Body over 4096 bytes."),
                                   "422": invalid, "503": redis_down}},
        },
    }
