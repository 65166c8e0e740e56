"""/openapi.json: a valid OpenAPI 3 document that describes exactly the routes that exist."""

from __future__ import annotations

from openapi_spec_validator import validate

from app.action_service.app import create_app
from app.action_service.openapi import build_openapi
from app.actions.action import FIELDS, OPTIONAL_FIELDS
from app.settings import load_settings


def test_document_is_valid_openapi():
    validate(build_openapi())


def test_documented_operations_are_exactly_the_mounted_routes():
    app = create_app(load_settings({}, action_token="t"))
    mounted = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None and route.method != "*"  # refusals, not operations
    }
    documented = {
        (method, path) for path, item in build_openapi()["paths"].items() for method in item
    }
    assert mounted == documented


def test_action_schema_is_the_contract():
    action = build_openapi()["components"]["schemas"]["Action"]
    assert action["required"] == list(FIELDS)
    assert list(action["properties"]) == [*FIELDS, *OPTIONAL_FIELDS]
    assert action["additionalProperties"] is False


def test_every_v1_operation_is_secured_and_documents_401_and_503():
    for path, item in build_openapi()["paths"].items():
        for operation in item.values():
            if path.startswith("/v1/"):
                assert operation["security"] == [{"bearerAuth": []}]
                assert {"401", "503"} <= set(operation["responses"])
            else:
                assert "security" not in operation


def test_post_documents_every_contract_status():
    responses = build_openapi()["paths"]["/v1/actions"]["post"]["responses"]
    assert set(responses) == {"200", "201", "400", "401", "403", "409", "410", "413", "422", "503"}
    assert "Idempotent-Replayed" in responses["200"]["headers"]
    assert "Retry-After" in responses["503"]["headers"]
