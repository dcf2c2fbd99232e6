"""The decision service's OpenAPI document, derived, not written: each call's body from
its msgspec struct in :mod:`freqguard.service.bodies` (the class its body is decoded
into), each answer from its struct in :mod:`freqguard.service.schema` (the class that
encodes it), and every answer other than a 200 as a ``Problem`` (RFC 9457).

Every route the app serves is here (a test holds the two together), each with an
``operationId`` a generated client names its function after; the policy is a plain string
in the path, so the document is the same whatever the configuration serves.
"""

from __future__ import annotations

from typing import Any

import msgspec

from freqguard.service.bodies import BODIES, MAX_BODY
from freqguard.service.schema import ANSWERS

__all__ = ["document"]

_REF = "#/components/schemas/{}"


def _problem(description: str) -> dict[str, Any]:
    schema = {"$ref": _REF.format("Problem")}
    return {"description": description, "content": {"application/problem+json": {"schema": schema}}}


def _json(description: str, name: str) -> dict[str, Any]:
    schema = {"$ref": _REF.format(name)}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ANY = {
    "405": _problem("a method the path does not take (Allow lists those it does)"),
    "421": _problem("a Host the service does not answer to (freqguard serve --allow-host)"),
}
_CALL_ERRORS = {
    "401": _problem("a valid bearer token is required (the service has tokens)"),
    "403": _problem("a browser's call from another origin or site"),
    "404": _problem("no such policy or rule"),
    **_ANY,
    "413": _problem(f"a body over {MAX_BODY} bytes"),
    "415": _problem("a body that is not application/json"),
    "422": _problem("a body the call does not take; field names what"),
    "500": _problem("the service failed unexpectedly (the details are in its log)"),
    "503": _problem("the store failed (and the policy's on_error is raise)"),
}


def _call(operation: str, summary: str, body: str, answer: str) -> dict[str, Any]:
    schema = {"$ref": _REF.format(body)}
    return {
        "operationId": operation,
        "summary": summary,
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "responses": {"200": _json("done", answer), **_CALL_ERRORS},
    }


def _get(operation: str, summary: str, ok: dict[str, Any], **more: Any) -> dict[str, Any]:
    responses = {"200": ok, **more, **_ANY}
    return {
        "get": {
            "operationId": operation,
            "summary": summary,
            "security": [],
            "responses": responses,
        }
    }


def _media(description: str, media_type: str) -> dict[str, Any]:
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


def _policy_calls(base: str) -> dict[str, Any]:
    calls = {
        "hit": _call("hit", "decide and count one hit", "CostedCall", "Decision"),
        "hit-many": _call("hitMany", "decide a batch, in order", "ManyCall", "Decisions"),
        "peek": _call("peek", "what a hit would get; counts nothing", "ContextCall", "Decision"),
        "refund": _call("refund", "give back the newest units", "CostedCall", "Decision"),
        "reset": _call(
            "reset",
            "forget the counts keyed by exactly the context's dimensions (or of the rules named)",
            "ResetCall",
            "ResetDone",
        ),
        "limits": _call(
            "limits", "each rule's rate for a partition value", "ContextCall", "Limits"
        ),
        "denials": _call(
            "denials",
            "a context's denials over the last minutes, and its digest (its key in statsTop)",
            "DenialsCall",
            "Denials",
        ),
    }
    return {f"{base}/{name}": {"post": call} for name, call in calls.items()}


_QUERY_POLICY = {
    "name": "policy",
    "in": "query",
    "required": False,
    "description": "one policy's only (default: every policy's)",
    "schema": {"type": "string"},
}


def _history() -> dict[str, Any]:
    item = _get(
        "statsHistory",
        "decisions allowed and denied per minute over the last hour, per policy and rule, "
        "of every worker and host",
        _json("the series", "History"),
        **{"404": _problem("no policy of that name, or the history is off")},
    )
    item["get"]["parameters"] = [_QUERY_POLICY]
    return item


def _top() -> dict[str, Any]:
    item = _get(
        "statsTop",
        "the keys denied most over the last minutes, of every worker (digests without a token)",
        _json("the keys", "TopKeys"),
        **{
            "404": _problem("no policy of that name, or the history is off"),
            "422": _problem("a bad minutes"),
        },
    )
    item["get"]["parameters"] = [
        _QUERY_POLICY,
        {
            "name": "minutes",
            "in": "query",
            "required": False,
            "description": "how many of the last minutes (1 to 15; default 5)",
            "schema": {"type": "integer", "minimum": 1, "maximum": 15, "default": 5},
        },
    ]
    return item


def _paths() -> dict[str, Any]:
    base = "/v1/policies/{policy}"
    policy = {"name": "policy", "in": "path", "required": True, "schema": {"type": "string"}}
    rule = {"name": "rule", "in": "path", "required": True, "schema": {"type": "string"}}
    paths = _policy_calls(base)
    paths[f"{base}/limits/{{rule}}"] = {
        "put": _call(
            "setLimit",
            "a rule at another rate (null: exempt) for a partition value",
            "LimitCall",
            "Limits",
        ),
        "delete": _call("clearLimit", "back to the rule's own rate", "ContextCall", "Limits"),
    }
    for path, item in paths.items():
        item["parameters"] = [policy, rule] if path.endswith("{rule}") else [policy]
    unready = _problem("the store did not answer in time, or refused the probe")
    paths.update(
        {
            "/healthz": _get("healthz", "the service is up", _json("up", "Health")),
            "/readyz": _get(
                "readyz", "the store answers", _json("ready", "Ready"), **{"503": unready}
            ),
            "/metrics": _get(
                "metrics",
                "Prometheus metrics",
                _media("the text format", "text/plain"),
                **{"404": _problem("the prometheus extra is not installed")},
            ),
            "/openapi.json": _get(
                "openapi",
                "this document",
                {
                    "description": "the document",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
            ),
            "/": _get("page", "the operator's page", _media("an HTML page", "text/html")),
            "/v1/policies": _get(
                "policies", "the policies and their rules", _json("policies", "PolicyList")
            ),
            "/v1/stats": _get(
                "stats", "decisions and denials per policy and rule", _json("rows", "Stats")
            ),
            "/v1/stats/history": _history(),
            "/v1/stats/top": _top(),
        }
    )
    return paths


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service."""
    _, schemas = msgspec.json.schema_components(
        (*ANSWERS, *BODIES), ref_template=_REF.replace("{}", "{name}")
    )
    return {
        "openapi": "3.1.0",
        "info": {"title": "freqguard decision service", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
        "security": [{"bearer": []}, {}],
        "paths": _paths(),
    }
