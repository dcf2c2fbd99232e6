"""The decision service's OpenAPI document."""

from __future__ import annotations

from typing import Any

__all__ = ["document"]

_CONTEXT = {
    "type": "object",
    "description": "the hit's context: the policy's dimensions, and what its rules read",
    "additionalProperties": {"type": ["string", "integer"]},
}
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
_PROBLEM = {
    "description": "a problem (RFC 9457)",
    "content": {"application/problem+json": {"schema": {"type": "object"}}},
}
_ERRORS = {
    "401": {"description": "a token is required"},
    "404": _PROBLEM,
    "413": _PROBLEM,
    "422": _PROBLEM,
    "503": _PROBLEM,
}


def _body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _answer(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "200": {"description": "done", "content": {"application/json": {"schema": schema}}},
        **_ERRORS,
    }


def _post(summary: str, body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    return {"summary": summary, "requestBody": body, "responses": _answer(answer)}


def document(policies: list[str]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service (its policies named in the path's enum)."""
    policy = {
        "name": "policy",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": policies},
    }
    rule = {"name": "rule", "in": "path", "required": True, "schema": {"type": "string"}}
    cost = {"type": "integer", "minimum": 0, "default": 1}
    one = _body({"context": _CONTEXT, "cost": cost}, ["context"])
    limits = {"type": "object", "properties": {"limits": {"type": "object"}}}
    base = "/v1/policies/{policy}"
    paths: dict[str, Any] = {
        f"{base}/hit": {"post": _post("decide and count one hit", one, _DECISION)},
        f"{base}/hit-many": {
            "post": _post(
                "decide a batch, in order",
                _body(
                    {"contexts": {"type": "array", "items": _CONTEXT}, "cost": cost}, ["contexts"]
                ),
                {
                    "type": "object",
                    "properties": {"decisions": {"type": "array", "items": _DECISION}},
                },
            )
        },
        f"{base}/peek": {"post": _post("what a hit would get; counts nothing", one, _DECISION)},
        f"{base}/refund": {"post": _post("give back the newest units", one, _DECISION)},
        f"{base}/reset": {"post": _post("forget a context's counts", one, {"type": "object"})},
        f"{base}/limits": {"post": _post("each rule's rate for a partition value", one, limits)},
        f"{base}/limits/{{rule}}": {
            "parameters": [policy, rule],
            "put": _post(
                "one rule at another rate (null: exempt) for a partition value",
                _body(
                    {
                        "context": _CONTEXT,
                        "rate": {"type": ["string", "null"]},
                        "ttl": {"type": ["number", "null"]},
                    },
                    ["context"],
                ),
                limits,
            ),
            "delete": _post("back to the rule's own rate", one, limits),
        },
        "/healthz": {
            "get": {"summary": "the service is up", "responses": {"200": {"description": "up"}}}
        },
        "/metrics": {
            "get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text"}}}
        },
    }
    for path, item in paths.items():
        if path.startswith(base) and "parameters" not in item:
            item["parameters"] = [policy]
    return {
        "openapi": "3.1.0",
        "info": {"title": "freqguard decision service", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
        "paths": paths,
    }
