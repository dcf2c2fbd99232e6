"""The decision service's OpenAPI document: each call's body as
:mod:`freqguard.service.bodies` declares (and checks) it, and every answer other than a 200
as a problem (RFC 9457)."""

from __future__ import annotations

from typing import Any

from freqguard.service.bodies import COSTED, LIMIT, MANY, ONE, RESET, Body

__all__ = ["document"]

_RULE = {
    "type": "object",
    "properties": {
        "rule": {"type": "string"},
        "allowed": {"type": "boolean"},
        "remaining": {"type": "integer"},
        "limit": {"type": "integer"},
        "reset_after": {"type": "number"},
        "retry_after": {"type": "number"},
        "shadow": {"type": "boolean"},
    },
}
_DECISION = {
    "type": "object",
    "required": ["allowed", "retry_after", "remaining", "limit", "reset_after", "denied_by"],
    "properties": {
        "allowed": {"type": "boolean"},
        "retry_after": {"type": "number", "description": "seconds until the hit would fit"},
        "remaining": {"type": "integer"},
        "limit": {"type": "integer"},
        "reset_after": {"type": "number"},
        "denied_by": {"type": "array", "items": {"type": "string"}},
        "rules": {"type": "array", "items": _RULE},
        "source": {"type": "string"},
    },
}
_LIMITS = {"type": "object", "properties": {"limits": {"type": "object"}}}
_PROBLEM = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "what went wrong, in words"},
        "instance": {"type": "string"},
        "field": {
            "type": "string",
            "description": "with a 422, the field at fault: cost, context.recipient, "
            "contexts[3].user, body...",
        },
    },
}


def _problem(description: str) -> dict[str, Any]:
    schema = {"$ref": "#/components/schemas/Problem"}
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": schema}},
    }


_ERRORS = {
    "401": _problem("a valid bearer token is required (the service has tokens)"),
    "403": _problem("a browser's call from another origin or site"),
    "404": _problem("no such policy or rule"),
    "413": _problem("a body over 1 MiB"),
    "415": _problem("a body that is not application/json"),
    "422": _problem("a body the call does not take; field names what"),
    "500": _problem("the service failed unexpectedly (the details are in its log)"),
    "503": _problem("the store failed (and the policy's on_error is raise)"),
}


def _call(summary: str, body: Body, answer: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": summary,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": body.schema()}},
        },
        "responses": {
            "200": {"description": "done", "content": {"application/json": {"schema": answer}}},
            **_ERRORS,
        },
    }


def _get(summary: str, answer: str) -> dict[str, Any]:
    return {
        "get": {"summary": summary, "security": [], "responses": {"200": {"description": answer}}}
    }


def document(policies: list[str]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service (its policies named in the path's enum)."""
    policy = {
        "name": "policy",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": policies},
    }
    rule = {"name": "rule", "in": "path", "required": True, "schema": {"type": "string"}}
    many = {"type": "object", "properties": {"decisions": {"type": "array", "items": _DECISION}}}
    base = "/v1/policies/{policy}"
    paths: dict[str, Any] = {
        f"{base}/hit": {"post": _call("decide and count one hit", COSTED, _DECISION)},
        f"{base}/hit-many": {"post": _call("decide a batch, in order", MANY, many)},
        f"{base}/peek": {"post": _call("what a hit would get; counts nothing", ONE, _DECISION)},
        f"{base}/refund": {"post": _call("give back the newest units", COSTED, _DECISION)},
        f"{base}/reset": {
            "post": _call(
                "forget the counts keyed by exactly the context's dimensions (or of the "
                "rules named)",
                RESET,
                {
                    "type": "object",
                    "properties": {
                        "reset": {"type": "boolean"},
                        "rules": {"type": "array", "items": {"type": "string"}},
                    },
                },
            )
        },
        f"{base}/limits": {"post": _call("each rule's rate for a partition value", ONE, _LIMITS)},
        f"{base}/limits/{{rule}}": {
            "parameters": [policy, rule],
            "put": _call(
                "a rule at another rate (null: exempt) for a partition value", LIMIT, _LIMITS
            ),
            "delete": _call("back to the rule's own rate", ONE, _LIMITS),
        },
        "/healthz": _get("the service is up", "up"),
        "/metrics": _get("Prometheus metrics", "text"),
        "/openapi.json": _get("this document", "the document"),
        "/v1/policies": _get("the policies and their rules (the operator's page)", "policies"),
        "/v1/stats": _get("decisions and denials per policy and rule", "rows"),
    }
    for path, item in paths.items():
        if path.startswith(base) and "parameters" not in item:
            item["parameters"] = [policy]
    return {
        "openapi": "3.1.0",
        "info": {"title": "freqguard decision service", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Problem": _PROBLEM},
        },
        "security": [{"bearer": []}, {}],
        "paths": paths,
    }
