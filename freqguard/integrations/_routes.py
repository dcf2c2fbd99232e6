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

import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from freqguard.errors import ConfigError, shown

__all__ = [
    "PathPattern",
    "check_pattern",
    "pattern_regex",
    "probe_paths",
    "route_path",
    "walk",
    "walked",
]

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
        raise ConfigError(f"a route pattern starts with '/', got {shown(pattern)}")
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
        raise ConfigError(f"a route pattern is a string starting with '/', got {shown(pattern)}")
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
    """A pattern matched as its regular expression matches (``^...$``, each parameter
    greedy, in order: Starlette's), in time linear in the path when its convertors are
    the built-in ones: their values are runs of a character class (``str``, ``int``,
    ``path``), a float or a uuid, so which positions each element can reach, and from
    which the rest can still match, are sets one pass finds. The regex's backtracking
    over parameters sharing a segment (``/files/{a}-{b}-{c}.txt``) grew as a power of the
    path's length on a path that fails: 8,000 ``-`` cost minutes. The regex still matches
    a path short enough that its worst case is about a millisecond (a walk's fixed cost
    is the larger there), and any path of a pattern whose regex cannot backtrack far (one
    parameter a segment, a ``path`` one only last) or that has an application's own
    convertor."""

    __slots__ = ("_elements", "_short", "groups", "regex")

    def __init__(self, pattern: str) -> None:
        parts = _parts(pattern)
        self.regex = pattern_regex(pattern)
        self.groups = self.regex.groups
        elements = walked(pattern)
        # the regex alone where it cannot backtrack far: one parameter a segment, and
        # a path parameter only last (a walk costs more than a regex on a short path)
        params = [(literal, c) for literal, name, c in parts if name]
        shared = any("/" not in literal for literal, _ in params[1:])
        spanning = any(c == "path" for _, c in params[:-1])
        self._elements = elements if shared or spanning else None
        # the parameters that backtrack together: those of one segment, or all of them
        # when a path parameter spans segments before another
        k, run = (len(params), 0) if spanning else (1, 0)
        for index, (literal, _) in enumerate(params):
            run = run + 1 if index and "/" not in literal else 1
            k = max(k, run)
        # below this length the regex's worst case is about a millisecond (about n^k / k!
        # steps, kept under 2e5), and a walk's fixed cost is the larger
        self._short = int((2e5 * math.factorial(k)) ** (1 / k))

    def match(self, path: str) -> dict[str, str] | None:
        """The path's parameters, as the regex's groups, if it matches; else None."""
        if self._elements is None or len(path) <= self._short:
            found = self.regex.match(path)
            return None if found is None else found.groupdict()
        return walk(path, self._elements)


def walked(pattern: str) -> list[tuple[str, str]] | None:
    """``pattern`` as :class:`_Walk` matches it: ``("", literal)`` and ``(name,
    convertor)`` (a uuid's by its regex), in order; None when a parameter's convertor is
    an application's own (its values are its regex's)."""
    known = _convertors()
    elements = []
    for literal, name, convertor in _parts(pattern):
        if literal:
            elements.append(("", literal))
        if name and known[convertor] not in _BUILT_IN.get(convertor, ()):
            return None
        if name:
            elements.append((name, convertor if convertor != "uuid" else known[convertor]))
    return elements


def walk(path: str, elements: list[tuple[str, str]]) -> dict[str, str] | None:
    """The parameters of ``path`` by ``elements`` (:func:`walked`), as the regex finds
    them, or None when it does not match."""
    return _Walk(path, elements).params()


#: The built-in convertors whose values are runs of one class: its test, the least length.
_RUNS: dict[str, tuple[Callable[[str], bool], int]] = {
    "str": (lambda c: c != "/", 1),
    "int": (lambda c: "0" <= c <= "9", 1),
    "path": (lambda c: c != "\n", 0),
}


class _Walk:
    """One path against a pattern's elements (``("", literal)`` or ``(name, convertor)``):
    from the end, the positions from which each suffix of elements matches the rest; then
    from the start, each parameter's end as the regex's greedy choice finds it (the
    longest end from which the rest matches)."""

    def __init__(self, path: str, elements: list[tuple[str, str]]) -> None:
        self.path, self.elements, size = path, elements, len(path)
        self.runs: dict[str, list[int]] = {}  # per class, where the run from each ends
        ends = {size} | ({size - 1} if path.endswith("\n") else set())  # "$"
        self.reach: list[list[bool]] = [[i in ends for i in range(size + 1)]]
        for element in reversed(elements):
            after = self.reach[0]
            latest = _latest(after)  # the latest reaching position at or before each
            self.reach.insert(0, self._row(element, after, latest))
        self.latest = [_latest(row) for row in self.reach]

    def _row(self, element: tuple[str, str], after: list[bool], latest: list[int]) -> list[bool]:
        """From which positions ``element`` and the rest after it match (the common kinds
        in one comprehension or one search each: this is the walk's cost)."""
        name, kind = element
        size = len(self.path)
        if not name:  # a literal: where it occurs, and the rest matches after it
            row = [False] * (size + 1)
            at = self.path.find(kind)
            while at >= 0:
                row[at] = after[at + len(kind)]
                at = self.path.find(kind, at + 1)
            return row
        if kind in _RUNS:  # a run: some end in it from which the rest matches
            least = _RUNS[kind][1]
            self._run(kind, 0)
            return [latest[end] >= at + least for at, end in enumerate(self.runs[kind])]
        return [self._best(element, at, after, latest) is not None for at in range(size + 1)]

    def _run(self, kind: str, at: int) -> int:
        """The end of the run of ``kind``'s characters from ``at`` (found once a path)."""
        runs = self.runs.get(kind)
        if runs is None:
            takes, path = _RUNS[kind][0], self.path
            runs = [len(path)] * (len(path) + 1)
            for position in range(len(path) - 1, -1, -1):
                runs[position] = runs[position + 1] if takes(path[position]) else position
            self.runs[kind] = runs
        return runs[at]

    def params(self) -> dict[str, str] | None:
        if not self.reach[0][0]:
            return None
        found, at = {}, 0
        for index, element in enumerate(self.elements):
            end = self._best(element, at, self.reach[index + 1], self.latest[index + 1])
            assert end is not None  # reach[index][at] said so
            if element[0]:
                found[element[0]] = self.path[at:end]
            at = end
        return found

    def _best(
        self, element: tuple[str, str], at: int, after: list[bool], latest: list[int]
    ) -> int | None:
        """The end the regex chooses for ``element`` from ``at``: among its possible ends,
        in the regex's order of trying, the first from which the rest matches (``after``)."""
        name, kind = element
        path = self.path
        if not name:
            end = at + len(kind)
            return end if path.startswith(kind, at) and after[end] else None
        if kind in _RUNS:
            return _in_range(at + _RUNS[kind][1], self._run(kind, at), latest)
        if kind == "float":  # [0-9]+(\.[0-9]+)?: the fraction taken first, longest first
            digits = self._run("int", at)
            if digits > at and path.startswith(".", digits):
                fraction = _in_range(digits + 2, self._run("int", digits + 1), latest)
                if fraction is not None:
                    return fraction
            return _in_range(at + 1, digits, latest)
        uuid = _compiled(kind).match(path, at)  # one end at most: its hyphens are fixed
        return uuid.end() if uuid is not None and after[uuid.end()] else None


@functools.lru_cache(maxsize=8)
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def _latest(row: list[bool]) -> list[int]:
    """For each position, the latest one at or before it where ``row`` holds (-1: none)."""
    found, latest = -1, []
    for position, holds in enumerate(row):
        found = position if holds else found
        latest.append(found)
    return latest


def _in_range(least: int, most: int, latest: list[int]) -> int | None:
    """The latest reaching position between ``least`` and ``most``, if any."""
    if most < least:
        return None
    end = latest[most]
    return end if end >= least else None


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
