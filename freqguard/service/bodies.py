"""What each call of the service takes in its body, declared once as a msgspec struct: its
decoder checks a body, a refusal names the field msgspec's path points at (``cost``,
``context.recipient``, ``contexts[3].user``), and the OpenAPI document's request schemas
are the structs' own. Shapes and types only: what a policy takes the guard says, naming
the argument (:attr:`freqguard.ConfigError.argument`).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from typing import Annotated, Any, NoReturn, TypeVar

import msgspec
from starlette.requests import ClientDisconnect, Request

from freqguard.bounds import MAX_BURST, MAX_LIMIT, MAX_RULES
from freqguard.config.nesting import deeper_than
from freqguard.service.problems import Problem, invalid, shown

__all__ = [
    "MAX_BATCH",
    "MAX_BODY",
    "MAX_DEPTH",
    "ContextCall",
    "CostedCall",
    "DenialsCall",
    "LimitCall",
    "ManyCall",
    "ResetCall",
    "decode",
    "member",
    "read",
]

MAX_BODY = 1 << 20  # bytes of one request's body
MAX_BATCH = 1000  # contexts of one hit-many call
MAX_DEPTH = 32  # levels of arrays and objects in a body (a call's need at most three)
MAX_RATE = 100  # characters of a rate string
MAX_COST = max(MAX_LIMIT, MAX_BURST)  # no rule holds more: a greater cost never fits
TOP_MINUTES = 15  # the minutes the keys denied most are kept (service.history's)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

Body = TypeVar("Body", bound=msgspec.Struct)

Context = Annotated[
    dict[str, str | int],
    msgspec.Meta(description="the hit's context: the policy's dimensions, and what its rules read"),
]
Cost = Annotated[int, msgspec.Meta(ge=0, le=MAX_COST)]


class _Call(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A call's body: a JSON object of its fields and no others."""


class ContextCall(_Call, frozen=True):
    """peek, the limits of a context, and a limit cleared: a context only."""

    context: Context


class CostedCall(_Call, frozen=True):
    """hit and refund: a context and a cost."""

    context: Context
    cost: Cost = 1


class ManyCall(_Call, frozen=True):
    """hit-many: contexts, in order, and one cost for each."""

    contexts: Annotated[list[Context], msgspec.Meta(min_length=1, max_length=MAX_BATCH)]
    cost: Cost = 1


RuleName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class ResetCall(_Call, frozen=True):
    """reset: the values of the dimensions whose states it forgets, or the rules it names."""

    context: Annotated[
        dict[str, str | int],
        msgspec.Meta(
            description="the values of the dimensions whose states are forgotten (the rules "
            "keyed by exactly those), or of the named rules' dimensions"
        ),
    ]
    rules: (
        Annotated[
            list[RuleName],
            msgspec.Meta(
                min_length=1,
                max_length=MAX_RULES,
                description="the rules to reset (each keyed by exactly the context's "
                "dimensions); null: those keyed by exactly them",
            ),
        ]
        | None
    ) = None


class LimitCall(_Call, frozen=True):
    """a limit set: the partition's value, the rate (null: exempt) and how long it holds."""

    context: Context
    rate: Annotated[
        Annotated[str, msgspec.Meta(max_length=MAX_RATE)] | None,
        msgspec.Meta(description='a rate ("60/minute"); null exempts the rule'),
    ]
    ttl: Annotated[
        Annotated[float, msgspec.Meta(gt=0)] | None,
        msgspec.Meta(description="seconds the limit holds; null: until cleared"),
    ] = None


class DenialsCall(_Call, frozen=True):
    """a context's denials: the context, and over how many of the last minutes."""

    context: Context
    minutes: Annotated[int, msgspec.Meta(ge=1, le=TOP_MINUTES)] = 5


_DECODERS: dict[type[msgspec.Struct], msgspec.json.Decoder[Any]] = {}  # by the body, made once
_PATH = re.compile(r"(.*?)(?: - at `\$(.*)`)?$", re.DOTALL)
_KNOWN = re.compile(r"Object (?:contains unknown|missing required) field `(.*)`$", re.DOTALL)
#: msgspec's words for a JSON value's type, in JSON's (``Expected `int`, got `bool` ``)
_JSON_TYPES = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "a boolean",
    "null": "null",
    "object": "an object",
    "array": "an array",
}
_TYPE = re.compile(r"`([a-z |]+)`")


def _in_json(what: str) -> str:
    """msgspec's message in a JSON client's words: ``an integer, got a boolean``."""
    words = _TYPE.sub(
        lambda found: " or ".join(
            _JSON_TYPES.get(name.strip(), name.strip()) for name in found.group(1).split("|")
        ),
        what,
    )
    return words.removeprefix("Expected ")


def member(path: str, name: str) -> str:
    """The path of ``name`` in the object at ``path``: ``context.recipient``, or
    ``context["a b"]`` for a name that is not plain (cut short if long)."""
    if _PLAIN_NAME.fullmatch(name):
        return f"{path}.{name}" if path else name
    return f"{path}[{json.dumps(name[:64])}]"


def _named(error: msgspec.ValidationError, data: Any, body: type[msgspec.Struct]) -> Problem:
    """A 422 naming the field msgspec's message points at (``$.contexts[1]``); a context's
    value, which msgspec points at as ``[...]``, is found by its name in ``data`` (the
    body as plain JSON values, when it could be read so)."""
    found = _PATH.match(str(error))
    assert found is not None  # the pattern matches any text
    what, where = found.group(1), (found.group(2) or "").lstrip(".")
    if where.endswith("[...]"):
        where = where[: -len("[...]")]
        for name, value in _at(data, where).items():
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                return invalid(
                    member(where, str(name)), f"a string or an integer, got {_got(value)}"
                )
        return invalid(where, _in_json(what))
    known = _KNOWN.match(what)
    if known is not None:
        name = known.group(1)
        if what.startswith("Object missing"):
            return invalid(name, "required")
        fields = body.__struct_fields__
        close = difflib.get_close_matches(name[:64], fields, n=1)  # bounded: any body
        meant = f"did you mean {close[0]}? " if close else ""
        takes = f"not a field of this call ({meant}it takes: {', '.join(fields)})"
        return invalid(member("", name), takes)
    if what == "Number out of range":
        return invalid(where or "body", f"got {_got(math.inf)}")
    sent = _at(data, "").get(where)
    if what.endswith(", got `float`") and isinstance(sent, float):  # the number as sent
        # (a name given twice: msgspec refused one, Python's reader kept the last)
        return invalid(where, f"{_in_json(what).partition(', got')[0]}, got {_got(sent)}")
    return invalid(where or "body", _in_json(what))


def _no_constant(name: str) -> NoReturn:
    """Python's reader takes NaN and Infinity; JSON has no such words."""
    raise ValueError(f"not JSON: {name}")


def _got(value: Any) -> str:
    """A value the client sent, as a message shows it: a number past a 64-bit float's
    range (``1e400``, which Python's reader takes as infinity) said so."""
    if isinstance(value, float) and not math.isfinite(value):
        return "a number out of range (past a 64-bit float's)"
    return shown(value)


def _at(data: Any, path: str) -> dict[Any, Any]:
    """The object at ``path`` (``context``, ``contexts[2]``) in ``data``, or an empty one."""
    for step in re.findall(r"[A-Za-z_]+|\[\d+\]", path):
        if step.startswith("["):
            index = int(step[1:-1])
            data = data[index] if isinstance(data, list) and index < len(data) else None
        else:
            data = data.get(step) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


async def read(request: Request, body: type[Body]) -> Body:
    """The request's body, up to :data:`MAX_BODY` bytes, as ``body`` (its ASGI messages read
    as Starlette's ``Request.stream`` reads them, without its per-chunk machinery).

    Raises:
        Problem: 413 for a larger body; 422 as :func:`decode` says.
        ClientDisconnect: the client went away first.
    """
    declared = request.headers.get("content-length", "")
    # ASCII digits only (int() reads others, and refuses past 4,300 of them)
    if declared.isascii() and declared.isdigit() and int(declared[:12]) > MAX_BODY:
        raise Problem(413, f"a body is at most {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise Problem(413, f"a body is at most {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return decode(chunks[0] if len(chunks) == 1 else b"".join(chunks), body)


def decode(raw: bytes, body: type[Body]) -> Body:
    """A body's bytes as ``body``.

    Raises:
        Problem: 422 naming the field at fault (``body`` for one that is not UTF-8 JSON,
            or nested more than :data:`MAX_DEPTH` levels).
    """
    if deeper_than(raw, MAX_DEPTH):  # before a parser, whose depth is the stack's
        raise invalid("body", f"nested too deeply (more than {MAX_DEPTH} levels)")
    decoder = _DECODERS.get(body) or _DECODERS.setdefault(body, msgspec.json.Decoder(body))
    try:
        decoded: Body = decoder.decode(raw)
        return decoded
    except msgspec.ValidationError as exc:
        try:  # to find a context's value by its name: Python's reader, which takes a
            # number out of a float's range (1e400) as infinity, where msgspec's refuses it
            data = json.loads(raw, parse_constant=_no_constant)  # bounded (above)
        except ValueError:  # a number too long, text not UTF-8 (the typed decoder
            # failed first on a field): named by its place
            data = None
        raise _named(exc, data, body) from None
    except msgspec.DecodeError as exc:
        raise invalid("body", f"not JSON: {str(exc).removeprefix('JSON is malformed: ')}") from None
    except UnicodeDecodeError as exc:  # bytes not UTF-8 inside a string (Latin-1 text)
        raise invalid(
            "body", f"not UTF-8: byte {exc.object[exc.start]:#04x} at {exc.start}"
        ) from None
