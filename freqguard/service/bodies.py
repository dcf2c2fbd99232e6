"""What each call of the service takes in its body, said once: each body's fields, how each
is checked and its JSON Schema. :func:`read` checks a request against its :class:`Body`;
the OpenAPI document (:mod:`freqguard.service.openapi`) is made from the same
declarations, so the two cannot drift.

This layer knows shapes and types only; what a policy takes (its dimensions, a cost its
rules can grant, a rate a rule can take) is :mod:`freqguard.service.checks`'. A problem
names its field as a path into the body: ``cost``, ``context.recipient``,
``contexts[3].user``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from freqguard.bounds import MAX_BURST, MAX_LIMIT, MAX_RULES
from freqguard.config.nesting import deeper_than
from freqguard.service.problems import Problem, invalid, shown

__all__ = [
    "COSTED",
    "DENIALS",
    "LIMIT",
    "MANY",
    "MAX_BATCH",
    "MAX_BODY",
    "MAX_DEPTH",
    "ONE",
    "RESET",
    "Body",
    "Field",
    "member",
    "read",
    "read_json",
]

MAX_BODY = 1 << 20  # bytes of one request's body
MAX_BATCH = 1000  # contexts of one hit-many call
MAX_DEPTH = 32  # levels of arrays and objects in a body (a call's need at most three)
MAX_DIGITS = 4300  # of an integer in a body (Python's own limit for turning one into text)
MAX_RATE = 100  # characters of a rate string
MAX_COST = max(MAX_LIMIT, MAX_BURST)  # no rule holds more: a greater cost never fits
TOP_MINUTES = 15  # the minutes the keys denied most are kept (service.history's)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: A run of digits that could be an integer too long to read at once (msgspec would read
#: it, at a quadratic cost; Python's reader here keeps it as :class:`_Huge`).
_LONG_NUMBER = re.compile(rb"[0-9]{%d}" % (MAX_DIGITS + 1))
_decode = msgspec.json.Decoder().decode

Check = Callable[[Any, str], Any]


class _Huge:
    """An integer of more digits than a body may hold, kept to be refused by its field."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def _integer(text: str) -> int | _Huge:
    return int(text) if len(text) <= MAX_DIGITS else _Huge(len(text))


async def _body(receive: Receive) -> bytes:
    """The body's bytes, up to :data:`MAX_BODY` (the ASGI messages read as Starlette's
    ``Request.stream`` reads them, without its per-chunk machinery: a hit's body is one).

    Raises:
        Problem: 413 for a larger body.
        ClientDisconnect: the client went away first.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise Problem(413, f"a body is at most {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def read_json(request: Request) -> Any:
    """The request's body as JSON, read up to :data:`MAX_BODY` bytes.

    Raises:
        Problem: 413 for a larger body; 422 (field ``body``) for one that is not UTF-8
            JSON, or nested more than :data:`MAX_DEPTH` levels.
    """
    declared = request.headers.get("content-length", "")
    # ASCII digits only (int() reads others, and refuses past 4,300 of them): a sibling of
    # the stats query's 500
    if declared.isascii() and declared.isdigit() and int(declared[:12]) > MAX_BODY:
        raise Problem(413, f"a body is at most {MAX_BODY} bytes")
    raw = await _body(request.receive)
    if deeper_than(raw, MAX_DEPTH):  # before a parser, whose depth is the stack's
        raise invalid("body", f"nested too deeply (more than {MAX_DEPTH} levels)")
    if _LONG_NUMBER.search(raw) is None:  # else Python's reader, which keeps them apart
        try:
            return _decode(raw)
        except (msgspec.DecodeError, RecursionError):
            pass  # what is wrong, said as below
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("body", "not UTF-8 text") from None
    try:
        return json.loads(text, parse_int=_integer)
    except RecursionError:
        raise invalid("body", "nested too deeply") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise invalid("body", f"not JSON: {exc.msg} ({where})") from None
    except ValueError:  # a float too long for Python's own parser, and the like
        raise invalid("body", "not JSON that the service can read") from None


def member(path: str, name: str) -> str:
    """The path of ``name`` in the object at ``path``: ``context.recipient``, or
    ``context["a b"]`` for a name that is not plain (cut short if long)."""
    if _PLAIN_NAME.fullmatch(name):
        return f"{path}.{name}" if path else name
    return f"{path}[{json.dumps(name[:64])}]"


# -- the checks, each of one value at a path ------------------------------------------------


def _context(value: Any, path: str) -> dict[str, str | int]:
    if not isinstance(value, dict):
        raise invalid(path, f"an object of name: value (strings or integers), got {shown(value)}")
    for name, item in value.items():
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise invalid(member(path, name), f"a string or an integer, got {shown(item)}")
    return value


def _contexts(value: Any, path: str) -> list[dict[str, str | int]]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_BATCH:
        got = f"{len(value)} items" if isinstance(value, list) else shown(value)
        raise invalid(path, f"an array of 1 to {MAX_BATCH} contexts, got {got}")
    return [_context(item, f"{path}[{index}]") for index, item in enumerate(value)]


def _cost(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COST:
        raise invalid(path, f"an integer from 0 to {MAX_COST}, got {shown(value)}")
    return value


def _rate(value: Any, path: str) -> str | None:
    if value is not None and (not isinstance(value, str) or len(value) > MAX_RATE):
        wanted = f'a rate ("60/minute", at most {MAX_RATE} characters) or null (exempt)'
        raise invalid(path, f"{wanted}, got {shown(value)}")
    return value


def _rules(value: Any, path: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 0 < len(value) <= MAX_RULES:
        got = f"{len(value)} items" if isinstance(value, list) else shown(value)
        raise invalid(path, f"an array of 1 to {MAX_RULES} rule names, or null, got {got}")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not _PLAIN_NAME.fullmatch(item.replace(".", "_")):
            raise invalid(f"{path}[{index}]", f"a rule's name, got {shown(item)}")
    return value


def _minutes(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= TOP_MINUTES:
        raise invalid(path, f"an integer from 1 to {TOP_MINUTES}, got {shown(value)}")
    return value


def _ttl(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise invalid(path, f"seconds > 0, or null for ever, got {shown(value)}")
    return value  # an int or a float, as given (a huge int has no float)


# -- the bodies -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One member of a body: how it is checked, its JSON Schema, and whether it must be
    given (else its default)."""

    check: Check
    schema: Mapping[str, Any]
    required: bool = False
    default: Any = None


@dataclass(frozen=True)
class Body:
    """A call's body: a JSON object of these fields and no others."""

    fields: Mapping[str, Field] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        """Its JSON Schema, as the OpenAPI document states it."""
        return {
            "type": "object",
            "properties": {name: dict(f.schema) for name, f in self.fields.items()},
            "required": [name for name, f in self.fields.items() if f.required],
            "additionalProperties": False,
        }


def read(body: Body, data: Any) -> dict[str, Any]:
    """``data`` checked against ``body``: each field's value, or its default.

    Raises:
        Problem: 422 naming the first field that is unknown, missing or bad.
    """
    if not isinstance(data, dict):
        raise invalid("body", f"a JSON object, got {shown(data)}")
    for name in data:
        if name not in body.fields:
            takes = ", ".join(body.fields)
            raise invalid(member("", name), f"not a field of this call (it takes: {takes})")
    out = {}
    for name, spec in body.fields.items():
        if name in data:
            out[name] = spec.check(data[name], name)
        elif spec.required:
            raise invalid(name, "required")
        else:
            out[name] = spec.default
    return out


CONTEXT_SCHEMA = {
    "type": "object",
    "description": "the hit's context: the policy's dimensions, and what its rules read",
    "additionalProperties": {"type": ["string", "integer"]},
}
_CONTEXT = Field(_context, CONTEXT_SCHEMA, required=True)
_COST = Field(
    _cost, {"type": "integer", "minimum": 0, "maximum": MAX_COST, "default": 1}, default=1
)

#: peek, the limits of a context, and a limit cleared: a context only.
ONE = Body({"context": _CONTEXT})
#: reset: the values of the dimensions whose states it forgets, or the rules it names.
RESET = Body(
    {
        "context": Field(
            _context,
            {
                "type": "object",
                "description": "the values of the dimensions whose states are forgotten (the "
                "rules keyed by exactly those), or of the named rules' dimensions",
                "additionalProperties": {"type": ["string", "integer"]},
            },
            required=True,
        ),
        "rules": Field(
            _rules,
            {
                "type": ["array", "null"],
                "items": {"type": "string"},
                "minItems": 1,
                "maxItems": MAX_RULES,
                "description": "the rules to reset (each keyed by exactly the context's "
                "dimensions); null: those keyed by exactly them",
            },
        ),
    }
)
#: hit and refund: a context and a cost.
COSTED = Body({"context": _CONTEXT, "cost": _COST})
#: hit-many: contexts, in order, and one cost for each.
MANY = Body(
    {
        "contexts": Field(
            _contexts,
            {"type": "array", "items": CONTEXT_SCHEMA, "minItems": 1, "maxItems": MAX_BATCH},
            required=True,
        ),
        "cost": _COST,
    }
)
#: a limit set: the partition's value, the rate (null: exempt) and how long it holds.
LIMIT = Body(
    {
        "context": _CONTEXT,
        "rate": Field(
            _rate,
            {
                "type": ["string", "null"],
                "maxLength": MAX_RATE,
                "description": 'a rate ("60/minute"); null exempts the rule',
            },
            required=True,
        ),
        "ttl": Field(
            _ttl,
            {
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "description": "seconds the limit holds; null: until cleared",
            },
        ),
    }
)
#: a context's denials: the context, and over how many of the last minutes.
DENIALS = Body(
    {
        "context": _CONTEXT,
        "minutes": Field(
            _minutes,
            {"type": "integer", "minimum": 1, "maximum": TOP_MINUTES, "default": 5},
            default=5,
        ),
    }
)
