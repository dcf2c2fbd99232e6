"""The configuration file's shape, written once as a JSON Schema: what :func:`check` holds a
file to, and what editors read (``docs/config.schema.json`` is this, written out).

Only the part of JSON Schema this shape needs is interpreted here (``type``, ``enum``,
``properties``, ``additionalProperties: false``, ``required``, ``items``, ``minItems``,
``uniqueItems``, ``anyOf``, ``minimum``, ``maximum``, ``exclusiveMinimum``); what the schema
cannot say (a rate that parses, a strategy's burst, a policy's bounds) is checked by the
objects it builds.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from freqguard.rules import Strategy
from freqguard.strategy import PEER_NAMES, peer_name

__all__ = ["SCHEMA", "SchemaError", "check", "shown"]

_STRATEGIES = [strategy.value for strategy in Strategy]  # the registry's words
_ON_ERROR: dict[str, Any] = {
    "description": "what a store failure answers: raise, allow (fail open), deny (fail "
    "closed), or a fallback backend, its limits shared out among 'workers'",
    "anyOf": [
        {"enum": ["raise", "allow", "deny"]},
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["fallback"],
            "properties": {
                "fallback": {"type": "string", "description": "a backend URL"},
                "workers": {"type": "integer", "minimum": 1},
            },
        },
    ],
}
_RULE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["rate"],
    "properties": {
        "rate": {"type": "string", "description": 'e.g. "15/minute", "5 per 59 seconds"'},
        "by": {
            "description": "the dimension(s) the rule is keyed by",
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        },
        "strategy": {"enum": _STRATEGIES},
        "name": {"type": "string"},
        "burst": {"type": "integer", "minimum": 1},
        "lease": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": 'a concurrency rule\'s ("N concurrent") lease, in seconds',
        },
        "shadow": {"type": "boolean"},
        "calendar": {
            "type": "boolean",
            "description": "per calendar day, week (from Monday) or month of a zone",
        },
        "tz": {"type": "string", "description": 'a calendar rule\'s zone, e.g. "Asia/Shanghai"'},
        "tz_from": {
            "type": "string",
            "description": "the context value naming each hit's zone (a calendar rule)",
        },
        "only": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string"},
            "description": "the priorities the rule applies to (default: all)",
        },
        "caps": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {"type": "integer", "minimum": 1},
            "description": "per priority, the count it stops at (below the limit)",
        },
        "tiers": {
            "description": "the rate by one context value (a plan), the rule's own else",
            "type": "object",
            "additionalProperties": False,
            "required": ["from", "rates"],
            "properties": {
                "from": {"type": "string", "description": "the context value, e.g. plan"},
                "rates": {
                    "type": "object",
                    "minProperties": 1,
                    "additionalProperties": {"type": "string"},
                },
            },
        },
    },
}
_POLICY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "rules"],
    "properties": {
        "name": {"type": "string"},
        "on_error": _ON_ERROR,
        "priorities": {"type": "array", "items": {"type": "string"}},
        "quiet": {
            "description": "hours of each local day when the policy sends nothing",
            "type": "object",
            "additionalProperties": False,
            "required": ["start", "end"],
            "properties": {
                "start": {"type": "string", "description": '"HH:MM"'},
                "end": {"type": "string", "description": '"HH:MM"'},
                "tz": {"type": "string"},
                "tz_from": {"type": "string"},
                "exempt": {"type": "array", "items": {"type": "string"}},
            },
        },
        "rules": {"type": "array", "minItems": 1, "items": _RULE},
    },
}

#: The configuration file's JSON Schema.
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "freqguard configuration",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "backend": {
            "type": "string",
            "description": "a backend URL (memory://, redis://, redis+cluster://, "
            "redis+sentinel://...); the FREQGUARD_URL environment variable wins",
        },
        "prefix": {"type": "string"},
        "on_error": _ON_ERROR,
        "deny_cache": {"type": "integer", "minimum": 0, "maximum": 10**8},
        "observers": {
            "type": "array",
            "uniqueItems": True,
            "items": {"enum": ["logging", "prometheus", "opentelemetry"]},
        },
        "breaker": {
            "description": "false for none, or the breaker's settings",
            "anyOf": [
                {"type": "boolean"},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "failures": {"type": "integer", "minimum": 1},
                        "cooldown": {"type": "number", "exclusiveMinimum": 0},
                    },
                },
            ],
        },
        "policy": {"type": "array", "items": _POLICY},
    },
}


class SchemaError(ValueError):
    """Where in the document (``path``: keys and list positions) a value breaks the schema,
    and what the schema allows there (``message``)."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path, self.message = path, message


# TOML's integers are 64-bit; no setting needs more, in either format
_LOW, _HIGH, _RANGE = -(2**63), 2**63 - 1, "from -2^63 to 2^63-1"


def shown(value: object) -> str:
    """``value`` as a message shows it: its ``repr``, cut short; an integer too long to
    write out (Python's digit limit) by its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3000:
        return f"an integer of about {value.bit_length() * 30103 // 100000} digits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # a long integer inside, or nesting past the limit
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 80 else text[:60] + "..." + text[-12:]


_TYPES: dict[str, Callable[[object], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    # a number is finite: nan passes every comparison with a minimum
    "number": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v))
    ),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, Mapping),
}
_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a table",
}


def _is(kind: object, value: object) -> bool:
    """Whether ``value`` is of the schema type ``kind`` (False for no type)."""
    test = _TYPES.get(kind) if isinstance(kind, str) else None
    return test is not None and test(value)


def allowed(schema: Mapping[str, Any]) -> str:
    """What ``schema`` allows, in words."""
    if "anyOf" in schema:
        return " or ".join(allowed(option) for option in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    words = _NAMES[schema["type"]]
    if "minimum" in schema:
        words += f" >= {schema['minimum']}"
    if "exclusiveMinimum" in schema:
        words += f" > {schema['exclusiveMinimum']}"
    if "maximum" in schema:
        words += f" and <= {schema['maximum']}"
    if schema["type"] == "object" and "properties" in schema:
        words += " of " + ", ".join(sorted(schema["properties"]))
    return words


def _meant(value: object, options: list[Any]) -> str:
    """The option a text not among ``options`` was likely meant as: the same word written
    as Python takes it (``sliding_log``), a peer's name for it (limits' ``moving-window``),
    or a close spelling."""
    if not isinstance(value, str):
        return ""
    words = [option for option in options if isinstance(option, str)]
    plain = "-".join(value.strip().lower().replace("_", " ").split())[:64]
    if plain in words:
        return f" (did you mean {plain!r}?)"
    peers = [name for name, (_, ours) in PEER_NAMES.items() if ours in words]
    close = difflib.get_close_matches(plain, [*peers, *words], n=1)
    if close and close[0] in peers:  # a peer's name for one of ours
        return f" ({peer_name(close[0])} is {PEER_NAMES[close[0]][1]!r} here)"
    return f" (did you mean {close[0]!r}?)" if close else ""


def check(
    value: object, schema: Mapping[str, Any] = SCHEMA, path: tuple[str | int, ...] = ()
) -> None:
    """Raise :class:`SchemaError` at the first place ``value`` breaks ``schema``."""
    first = next(errors(value, schema, path), None)
    if first is not None:
        raise first


def errors(
    value: object, schema: Mapping[str, Any] = SCHEMA, path: tuple[str | int, ...] = ()
) -> Iterator[SchemaError]:
    """Each place ``value`` breaks ``schema``, in the document's order: every key of an
    object and item of an array on its own, a value that breaks a choice (``anyOf``) or
    its kind once."""
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            error = next(errors(value, option, path), None)
            if error is None:
                return
            # the right kind, wrong inside: that is the error to tell
            if error.path != path and _is(option.get("type"), value):
                yield error
                return
        yield SchemaError(path, f"{shown(value)} is not {allowed(schema)}")
        return
    if "enum" in schema:
        if value not in schema["enum"] or isinstance(value, bool):
            meant = _meant(value, schema["enum"])
            yield SchemaError(path, f"{shown(value)} is not {allowed(schema)}{meant}")
        return
    kind = schema["type"]
    if not _TYPES[kind](value):
        yield SchemaError(path, f"{shown(value)} is not {allowed(schema)}")
    elif isinstance(value, int) and not isinstance(value, bool) and not _LOW <= value <= _HIGH:
        yield SchemaError(path, f"{shown(value)} is out of range: integers are {_RANGE}")
    elif any(
        bound in schema and not compare(value, schema[bound]) for bound, compare in _BOUNDS.items()
    ):
        yield SchemaError(path, f"{shown(value)} is not {allowed(schema)}")
    elif kind == "array":
        assert isinstance(value, list)
        if len(value) < schema.get("minItems", 0):
            yield SchemaError(path, f"needs at least {schema['minItems']} item(s), got none")
        if schema.get("uniqueItems"):
            for index, item in enumerate(value):
                if item in value[:index]:
                    yield SchemaError((*path, index), f"{shown(item)} is listed twice")
        for index, item in enumerate(value):
            yield from errors(item, schema["items"], (*path, index))
    elif kind == "object":
        assert isinstance(value, Mapping)
        yield from _object_errors(value, schema, path)


#: A number's bounds, and whether a value keeps within each.
_BOUNDS: dict[str, Callable[[Any, Any], bool]] = {
    "minimum": lambda value, bound: value >= bound,
    "maximum": lambda value, bound: value <= bound,
    "exclusiveMinimum": lambda value, bound: value > bound,
}


_ENVOY_RATE = "Envoy's rate_limit {unit, requests_per_unit} is rate = 'N/unit' ('10/minute')"
#: Keys a redis-cell or Envoy ratelimit user writes out of habit, and what says it here
#: (docs/coming-from/redis-cell.md, envoy-ratelimit.md).
PEER_KEYS = {
    "unlimited": (
        "Envoy's unlimited: a value exempt from a rule is a per-key limit of none, set at "
        "run time, not in the file (freqguard limit set FILE POLICY RULE none KEY=VALUE)"
    ),
    "max_burst": "redis-cell's max_burst is one less than the capacity: burst = max_burst + 1",
    "rate_limit": _ENVOY_RATE,
    "requests_per_unit": _ENVOY_RATE,
    "unit": _ENVOY_RATE,
    "replaces": (
        "Envoy's replaces: a rule's tiers give one value another rate in its place "
        "(tiers = {from = KEY, rates = {VALUE = RATE}})"
    ),
    "domain": "Envoy's domain is a policy's name ([[policy]] name = ...)",
    "descriptors": (
        "Envoy's descriptors are a policy's rules: by = a descriptor's key (each value its "
        "own count), its rate_limit the rule's rate"
    ),
}


def _object_errors(
    value: Mapping[Any, Any], schema: Mapping[str, Any], path: tuple[str | int, ...]
) -> Iterator[SchemaError]:
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", False)  # a schema: any key, so checked
    meant_keys = set()
    for key in value:
        if key not in properties and not isinstance(extra, Mapping):
            known = ", ".join(sorted(properties))
            close = difflib.get_close_matches(str(key), list(properties), n=1)
            meant = f"did you mean {close[0]!r}? " if close else ""
            if key in PEER_KEYS:  # the hint names no key of ours: a missing one is said
                meant = f"{PEER_KEYS[key]}; "
            else:
                meant_keys.update(close)
            yield SchemaError((*path, key), f"unknown key {shown(key)} ({meant}allowed: {known})")
    for key in schema.get("required", ()):
        if key not in value and key not in meant_keys:  # a misspelt one said so already
            yield SchemaError(path, f"{key!r} is missing")
    if len(value) < schema.get("minProperties", 0):
        yield SchemaError(path, f"needs at least {schema['minProperties']} entry, got none")
    for key, item in value.items():
        if key in properties or isinstance(extra, Mapping):
            yield from errors(item, properties.get(key, extra), (*path, key))
