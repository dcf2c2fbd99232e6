"""Route patterns (``/users/{user_id:int}``) as the frameworks match them, and the path they
are matched against.

A pattern is checked when its :class:`~freqguard.integrations.starlette.Limit` is made: one
that cannot match what its author meant (an unknown convertor, unbalanced braces, a bad or
repeated parameter name) is a ``ConfigError`` then, never a limit that quietly matches
nothing. Convertors are Starlette's: ``str`` (the default), ``path``, ``int``, ``float`` and
``uuid``, with the same regular expressions, plus any an application registered with
Starlette's ``register_url_convertor`` before the Limit was made. A werkzeug (Flask) rule,
``/users/<int:uid>``, is refused naming the pattern to write.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from freqguard.errors import ConfigError

__all__ = ["PathPattern", "check_pattern", "pattern_regex", "probe_paths", "route_path"]

#: Starlette's built-in convertors (starlette.convertors), for when Starlette is absent.
_CONVERTORS = {
    "str": "[^/]+",
    "path": ".*",
    "int": "[0-9]+",
    "float": r"[0-9]+(\.[0-9]+)?",
    "uuid": "[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}",
}
#: Values each built-in convertor takes that no route's literal plausibly equals, unlike
#: each other (one short, one long, in different characters): a convertor narrower than the
#: one they stand for (fewer characters, a least or most length) refuses at least one of
#: them, as does a literal equal to one by chance (see :func:`probe_paths`).
_PROBES = {
    "str": ("~fg-Probe.a", "QZ9!X" * 8, "_"),
    "path": ("~fg-Probe/a.b", "", "QZ9!X/" * 6),
    "int": ("0", "918273645546372819", "0042"),
    "float": ("7", "31415926535897932384.62643", "0.5"),
    "uuid": (
        "f0e1d2c3-b4a5-4968-8778-695a4b3c2d1e",
        "F0E1D2C3B4A5496887786A5B4C3D2E1F",
        "0000fe9f-0000-4000-8000-00000000fe9f",
        "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a",  # the third lower-case one, for Starlette < 0.38
    ),
}
#: The regular expressions Starlette's built-ins have had where the bounds allow: before
#: 0.38 its uuid took lower case with hyphens only (the probes it takes stand for it).
_BUILT_IN = {name: {regex} for name, regex in _CONVERTORS.items()}
_BUILT_IN["uuid"].add("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_BRACES = re.compile(r"{([^{}]*)}")
#: A werkzeug (Flask) rule's variable part, ``<int:uid>``, as werkzeug's rule parser reads it
_WERKZEUG = re.compile(
    r"<(?:(?P<converter>[a-zA-Z_][a-zA-Z0-9_]*)(?:\((?P<arguments>.*?)\))?:)?"
    r"(?P<variable>[a-zA-Z_][a-zA-Z0-9_]*)>"
)
#: werkzeug's converters as the convertors here (``any`` has none: ``{x}`` is one segment)
_FROM_WERKZEUG = {"default": "", "string": "", "int": ":int", "float": ":float"}
_FROM_WERKZEUG |= {"path": ":path", "uuid": ":uuid"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _convertors() -> Mapping[str, str]:
    """The convertors and their regular expressions: Starlette's own when it is installed
    (with those the application registered), else its built-ins."""
    try:
        from starlette.convertors import CONVERTOR_TYPES
    except ImportError:
        return _CONVERTORS
    return {**_CONVERTORS, **{name: c.regex for name, c in CONVERTOR_TYPES.items()}}


def _parts(pattern: str) -> list[tuple[str, str, str]]:
    """``(literal before, parameter, convertor)`` per parameter; raises ConfigError."""
    if not pattern.startswith("/"):
        raise ConfigError(f"a route pattern starts with '/', got {pattern!r}")
    _refuse_werkzeug(pattern)
    known = _convertors()
    parts: list[tuple[str, str, str]] = []
    last, seen = 0, set()
    for found in _BRACES.finditer(pattern):
        literal = pattern[last : found.start()]
        if "{" in literal or "}" in literal:
            break
        name, _, convertor = found.group(1).partition(":")
        convertor = convertor or "str"
        if not _NAME.fullmatch(name):
            raise ConfigError(
                f"route pattern {pattern!r}: {found.group(0)} needs a parameter name (a letter "
                "or _, then letters, digits or _), as in {user_id} or {user_id:int}"
            )
        if convertor not in known:
            raise ConfigError(
                f"route pattern {pattern!r}: unknown convertor {convertor!r} in "
                f"{found.group(0)}; the convertors are {', '.join(known)}"
            )
        if name in seen:
            raise ConfigError(f"route pattern {pattern!r} names the parameter {name!r} twice")
        if parts and not literal:  # and its regex would backtrack on a long path
            raise ConfigError(
                f"route pattern {pattern!r}: {{{parts[-1][1]}}} and {found.group(0)} are side "
                "by side, and no path says where one ends: put a literal between them"
            )
        seen.add(name)
        parts.append((literal, name, convertor))
        last = found.end()
    if "{" in pattern[last:] or "}" in pattern[last:]:
        raise ConfigError(
            f"route pattern {pattern!r} has unbalanced braces: a parameter is written "
            "{name} or {name:convertor}"
        )
    parts.append((pattern[last:], "", ""))
    if any("?" in literal or "#" in literal for literal, _, _ in parts):
        raise ConfigError(
            f"route pattern {pattern!r} holds a query or fragment ('?' or '#'), which no "
            "path it is matched against does: cap the path alone (a key function may read "
            "the query from the request)"
        )
    if any("*" in literal for literal, _, _ in parts):  # a glob matches only a star here
        glob = re.search(r"\*+", pattern)
        assert glob is not None  # a literal holds one
        star, end = glob.span()
        # a glob's '**' (any segments), or a '*' that ends the pattern, is the rest
        tail = "{rest:path}" if end - star > 1 or end == len(pattern) else "{part}"
        raise ConfigError(
            f"route pattern {pattern!r}: '*' is no wildcard here: write "
            f"{pattern[:star]}{tail}{pattern[end:]} ({{rest:path}} takes the rest of "
            "the path, {part} one segment)"
        )
    return parts


def _refuse_werkzeug(pattern: str) -> None:
    """A ConfigError naming the pattern to write, when ``pattern`` is written as a werkzeug
    rule: matched literally, ``/users/<int:uid>`` would cap no request."""
    if _WERKZEUG.search(pattern) is None:
        return

    def spelled(found: re.Match[str]) -> str:
        converter = found.group("converter") or "default"
        return "{" + found.group("variable") + _FROM_WERKZEUG.get(converter, "") + "}"

    raise ConfigError(
        f"route pattern {pattern!r} is werkzeug's (Flask's) syntax, which matches only that "
        f"text here: write {_WERKZEUG.sub(spelled, pattern)} (<name>, <int:name>, "
        "<float:name>, <uuid:name> and <path:name> are {name}, {name:int}, {name:float}, "
        "{name:uuid} and {name:path}; a converter's arguments are dropped, and any(...) or "
        "an application's own converter is {name}, any one segment)"
    )


def check_pattern(pattern: str, wanted: object = None) -> str:
    """``pattern``, if it is a route pattern that can match (see the module's docstring)
    and names the parameter ``wanted`` (a ``path_param`` key's), if any."""
    if not isinstance(pattern, str):
        raise ConfigError(f"a route pattern is a string starting with '/', got {pattern!r}")
    names = [name for _, name, _ in _parts(pattern) if name]
    if wanted is not None and wanted not in names:
        raise ConfigError(
            f"route pattern {pattern!r} has no parameter {wanted!r}, which its key, "
            f"path_param({wanted!r}), reads: its parameters are {', '.join(names) or 'none'}"
        )
    return pattern


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """The pattern as a regular expression of the whole path, its parameters as groups."""
    known = _convertors()
    out = []
    for literal, name, convertor in _parts(pattern):
        out.append(re.escape(literal))
        if name:
            out.append(f"(?P<{name}>{known[convertor]})")
    return re.compile("".join(out) + "$")


class PathPattern:
    """A pattern's regular expression behind checks that cost one pass over the path: the
    literal it starts with, the one it ends with (or that and a newline, which ``$`` lets
    through, as in Starlette), and, when no parameter can hold a ``/``, the number of
    ``/``. A path failing one never reaches the regex, whose backtracking over parameters
    sharing a segment (``/{a}-{b}-{c}.txt``) grows as a power of the path's length when it
    fails: a path of 8,000 ``-`` cost minutes. ``match`` answers as the regex's does."""

    __slots__ = ("groups", "head", "regex", "slashes", "tail")

    def __init__(self, pattern: str) -> None:
        parts = _parts(pattern)
        known = _convertors()
        self.regex = pattern_regex(pattern)
        self.groups = self.regex.groups
        self.head, self.tail = parts[0][0], parts[-1][0]
        fixed = all(
            not name or (c != "path" and known[c] in _BUILT_IN.get(c, ())) for _, name, c in parts
        )
        self.slashes = sum(literal.count("/") for literal, _, _ in parts) if fixed else None

    def match(self, path: str) -> re.Match[str] | None:
        if not path.startswith(self.head) or not (
            path.endswith(self.tail) or path.endswith(self.tail + "\n")
        ):
            return None
        if self.slashes is not None and path.count("/") != self.slashes:
            return None
        return self.regex.match(path)


def probe_paths(pattern: str) -> tuple[str, ...] | None:
    """Three paths ``pattern`` matches, each parameter given a value of its convertor that
    no route's literal plausibly equals, a different one in each path: a route that matches
    all three is taken to match every path ``pattern`` matches (a literal of its own, or a
    convertor narrower than the pattern's, refuses one of them). None when a parameter's
    convertor is an application's own (or a built-in one registered again), whose values
    are unknown here.
    """
    known = _convertors()
    parts = _parts(pattern)
    if any(name and known[c] not in _BUILT_IN.get(c, ()) for _, name, c in parts):
        return None
    taken = {c: [v for v in _PROBES[c] if re.fullmatch(known[c], v)][:3] for _, n, c in parts if n}
    probes = tuple(
        "".join(literal + (taken[c][at] if name else "") for literal, name, c in parts)
        for at in range(3)
    )
    own = pattern_regex(pattern)
    return probes if all(own.match(probe) for probe in probes) else None


def route_path(scope: Mapping[str, Any]) -> str:
    """The path an ASGI application routes on: ``path`` below ``root_path``.

    ``root_path`` is where the application is mounted (``uvicorn --root-path``, a Starlette
    ``Mount``); servers and frameworks put it in ``path`` too, so a pattern must be matched
    against the rest, as Starlette's router matches it. A ``path`` outside ``root_path`` is
    taken as it is.
    """
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    rest = path[len(root) :]
    if not rest:
        return ""  # the mount point itself: Starlette matches no route there (it redirects)
    return rest if rest.startswith("/") else path
