"""Schemathesis against /openapi.json of a running service: no 5xx, responses match the schema."""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from app.action_service.openapi import build_openapi
from app.actions.key import ACTION_TYPES, idempotency_key

pytestmark = pytest.mark.integration

#: A body over the service's size limit is refused as such (413) before its fields are read;
#: schemathesis's own list of rejections lacks it, and its list bodies can pass the 4 KiB limit.
_REJECTIONS = [*schemathesis.Config.from_dict({}).projects.default.checks
               .negative_data_rejection.expected_statuses, "413"]
_CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"mode": "all", "max-examples": 25},
        "checks": {
            "enabled": False,
            "not_a_server_error": {"enabled": True},
            "status_code_conformance": {"enabled": True},
            "content_type_conformance": {"enabled": True},
            "response_headers_conformance": {"enabled": True},
            "response_schema_conformance": {"enabled": True},
            "negative_data_rejection": {"enabled": True, "expected-statuses": _REJECTIONS},
            "missing_required_header": {"enabled": True},
            "ignored_auth": {"enabled": True},
        },
    }
)
schema = schemathesis.openapi.from_dict(build_openapi(), config=_CONFIG)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_responses_conform_to_the_schema(case, module_service_url: str, action_token: str) -> None:
    _derive_key(case)
    case.call_and_validate(
        base_url=module_service_url, headers={"Authorization": f"Bearer {action_token}"}, timeout=10
    )


def _derive_key(case: schemathesis.Case) -> None:
    """Give well-formed POST bodies their real key (and a fresh decision half the time).

    The schema cannot say "idempotency_key = idempotency_key(type, txn_id)", so without this
    nearly every generated action would stop at 422 and the Lua path would go unexercised.
    """
    body = case.body
    if case.operation.method.upper() != "POST" or not isinstance(body, dict):
        return
    if case.meta is None or case.meta.generation.mode != schemathesis.GenerationMode.POSITIVE:
        return  # a negative case must stay invalid
    if body.get("type") not in ACTION_TYPES or not isinstance(body.get("txn_id"), str):
        return
    key = idempotency_key(body["type"], body["txn_id"])
    body["idempotency_key"] = key
    if case.headers is not None and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = key
    if isinstance(body.get("decided_at_ms"), int) and int(key, 16) % 2:
        body["decided_at_ms"] = time.time_ns() // 1_000_000
