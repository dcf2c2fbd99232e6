"""The decision service's API, declared once: each operation in :data:`CALLS` (under
``/v1/policies/{policy}``) or :data:`READS` (a GET), from which the app makes its routes and
:func:`document` the OpenAPI document, with each body's and answer's schema that of the
struct that decodes or encodes it (:mod:`~freqguard.service.bodies`,
:mod:`~freqguard.service.schema`). The policy is a plain string in the path, so the
document is the same whatever the configuration serves.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import msgspec

import freqguard.service.schema as schema
from freqguard.service.bodies import (
    MAX_BODY,
    ContextCall,
    CostedCall,
    DenialsCall,
    LimitCall,
    ManyCall,
    ResetCall,
)

__all__ = ["BASE", "CALLS", "READS", "document"]

BASE = "/v1/policies/{policy}"
_REF = "#/components/schemas/{name}"


class Call(NamedTuple):
    """A call under :data:`BASE`: its method, path there, id, body and answer."""

    method: str
    path: str
    id: str
    body: type[msgspec.Struct]
    answer: type[msgspec.Struct]


class Read(NamedTuple):
    """A GET: its path, id, and its 200 (a struct, or a media type and its schema)."""

    path: str
    id: str
    description: str
    ok: type[msgspec.Struct] | tuple[str, dict[str, Any]]


CALLS = (
    Call("POST", "hit", "hit", CostedCall, schema.Decision),
    Call("POST", "hit-many", "hitMany", ManyCall, schema.Decisions),
    Call("POST", "peek", "peek", ContextCall, schema.Decision),
    Call("POST", "refund", "refund", CostedCall, schema.Decision),
    Call("POST", "reset", "reset", ResetCall, schema.ResetDone),
    Call("POST", "limits", "limits", ContextCall, schema.Limits),
    Call("POST", "denials", "denials", DenialsCall, schema.Denials),
    Call("PUT", "limits/{rule}", "setLimit", LimitCall, schema.Limits),
    Call("DELETE", "limits/{rule}", "clearLimit", ContextCall, schema.Limits),
)
_TEXT = {"type": "string"}
READS = (
    Read("/healthz", "healthz", "up", schema.Health),
    Read("/readyz", "readyz", "ready", schema.Ready),
    Read("/metrics", "metrics", "the text format", ("text/plain", _TEXT)),
    Read("/openapi.json", "openapi", "the document", ("application/json", {"type": "object"})),
    Read("/", "page", "an HTML page", ("text/html", _TEXT)),
    Read("/v1/policies", "policies", "policies", schema.PolicyList),
    Read("/v1/stats", "stats", "rows", schema.Stats),
    Read("/v1/stats/history", "statsHistory", "the series", schema.History),
    Read("/v1/stats/top", "statsTop", "the keys", schema.TopKeys),
)
_SUMMARIES = {
    "hit": "decide and count one hit",
    "hitMany": "decide a batch, in order",
    "peek": "what a hit would get; counts nothing",
    "refund": "give back the newest units; allowed: what it leaves",
    "reset": "forget the counts keyed by exactly the context's dimensions (or of the rules named)",
    "limits": "each rule's rate for a partition value",
    "denials": "a context's denials over the last minutes, and its digest (its key in statsTop)",
    "setLimit": "a rule at another rate (null: exempt) for a partition value",
    "clearLimit": "back to the rule's own rate",
    "healthz": "the service is up",
    "readyz": "the store answers",
    "metrics": "Prometheus metrics",
    "openapi": "this document",
    "page": "the operator's page",
    "policies": "the policies and their rules",
    "stats": "decisions and denials per policy and rule",
    "statsHistory": "decisions allowed and denied per minute over the last hour, per policy and "
    "rule, of every worker and host",
    "statsTop": "the keys denied most over the last minutes, of every worker (digests without a "
    "token)",
}
_OFF = "no policy of that name, or the history is off"
#: The problems a GET may answer beside every path's (405, 421).
_READ_PROBLEMS = {
    "readyz": {"503": "the store did not answer in time, or refused the probe"},
    "metrics": {"404": "the prometheus extra is not installed"},
    "statsHistory": {"404": _OFF},
    "statsTop": {"404": _OFF, "422": "a bad minutes"},
}


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    where = {"name": name, "in": "query", "required": False}
    return {**where, "description": description, "schema": schema}


_POLICY = _query("policy", "one policy's only (default: every policy's)", _TEXT)
#: as a denials call's body takes it
_MINUTES = msgspec.json.schema(DenialsCall)["$defs"]["DenialsCall"]["properties"]["minutes"]
_BY_MINUTES = _query("minutes", "how many of the last minutes (1 to 15; default 5)", _MINUTES)
_QUERIES = {"statsHistory": [_POLICY], "statsTop": [_POLICY, _BY_MINUTES]}


def _answer(description: str, media: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": schema}}}


#: The headers a problem of a status carries, as a client generated from the document sees.
_HEADERS = {
    "401": ("WWW-Authenticate", "string", "Bearer"),
    "405": ("Allow", "string", "the methods the path takes"),
    "503": ("Retry-After", "integer", "seconds before a retry"),
}


def _problems(problems: dict[str, str]) -> dict[str, Any]:
    ref = {"$ref": _REF.format(name="Problem")}
    answers = {s: _answer(d, "application/problem+json", ref) for s, d in problems.items()}
    for status, (name, kind, description) in _HEADERS.items():
        if status in answers:
            header = {"description": description, "schema": {"type": kind}}
            answers[status]["headers"] = {name: header}
    return answers


def _json(description: str, struct: type[msgspec.Struct]) -> dict[str, Any]:
    return _answer(description, "application/json", {"$ref": _REF.format(name=struct.__name__)})


_ANY = {
    "405": "a method the path does not take (Allow lists those it does)",
    "421": "a Host the service does not answer to (freqguard serve --allow-host)",
}
_CALL_ERRORS = {
    "401": "a valid bearer token is required (the service has tokens)",
    "403": "a browser's call from another origin or site",
    "404": "no such policy or rule",
    **_ANY,
    "413": f"a body over {MAX_BODY} bytes",
    "415": "a body that is not application/json",
    "422": "a body the call does not take; field names what",
    "500": "the service failed unexpectedly (the details are in its log)",
    "503": "the store failed (and the policy's on_error is raise)",
}


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for call in CALLS:
        body = {"$ref": _REF.format(name=call.body.__name__)}
        paths.setdefault(f"{BASE}/{call.path}", {})[call.method.lower()] = {
            "operationId": call.id,
            "summary": _SUMMARIES[call.id],
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {"200": _json("done", call.answer), **_problems(_CALL_ERRORS)},
        }
    for path, item in paths.items():
        item["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)}", path)
        ]
    for read in READS:
        ok = read.ok
        operation: dict[str, Any] = {
            "operationId": read.id,
            "summary": _SUMMARIES[read.id],
            "security": [],
            "responses": {
                "200": _json(read.description, ok)
                if isinstance(ok, type)
                else _answer(read.description, *ok),
                **_problems({**_READ_PROBLEMS.get(read.id, {}), **_ANY}),
            },
        }
        if read.id in _QUERIES:
            operation["parameters"] = _QUERIES[read.id]
        paths[read.path] = {"get": operation}
    return paths


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service."""
    answers = [c.answer for c in CALLS] + [r.ok for r in READS if isinstance(r.ok, type)]
    bodies = [c.body for c in CALLS]
    structs = (*dict.fromkeys(answers), schema.Problem, *dict.fromkeys(bodies))
    _, schemas = msgspec.json.schema_components(structs, ref_template=_REF)
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
