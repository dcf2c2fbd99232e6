"""A middleware's Limits in order: the first matching one decides a request, and a Limit that
earlier ones wholly cover, which could never decide one, is refused when they are compiled.

Covering is decided soundly: earlier routes cover a later one when each matches every one
of the later pattern's probe paths (:func:`~freqguard.integrations._routes.probe_paths`:
its parameters given unusual values of their convertors, three different ones) and their
methods take all the later one's (None: every method; GET brings HEAD), one route alone or
some of the methods each. A partial overlap (``/items/special`` before ``/items/{id}``) is
first match wins, by design, and allowed. A pattern with an application's own convertor
has no probes: it is never refused, and never taken to cover another.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from freqguard.errors import ConfigError, shown
from freqguard.integrations._decide import Route, compile_limit
from freqguard.integrations._http import Limit
from freqguard.integrations._routes import check_pattern, probe_paths

__all__ = ["checked_limits", "compile_limits"]


def compile_limits(limits: Sequence[Limit]) -> list[Route]:
    """Each Limit as a :class:`Route`, in order: the first matching one decides a request.

    Raises:
        ConfigError: a Limit that can never decide a request, because earlier ones match
            every request it matches (one alone, or some of its methods each); named, with
            their places in ``limits``.
    """
    for limit in limits:  # a path_param key reads the pattern's (a dependency's, FastAPI's)
        check_pattern(limit.path, getattr(limit.key, "path_param", None))
    routes = [compile_limit(limit) for limit in limits]
    probes = [probe_paths(limit.path) for limit in limits]
    # the earlier routes by the literal their pattern starts with: a route's regex matches
    # only paths that start with it, so only those whose literal starts every probe of a
    # later one may cover it (each later one checked against a few, not every earlier)
    starting: dict[str, list[int]] = {}
    for later, route in enumerate(routes):
        found = probes[later]
        common = "" if found is None or route.regex is None else _common_start(found)
        candidates = sorted(
            e for size in range(len(common) + 1) for e in starting.get(common[:size], ())
        )
        # an earlier pattern with an application's own convertor (no probes of its own)
        # covers nothing: its values are unknown, and all three probes of the later one
        # may fall in them by chance (at most 64 characters, no dot first)
        wider = [e for e in candidates if _paths_cover(routes[e], route, found)]
        methods: set[str] = set()
        for earlier in wider:
            if _methods_cover(routes[earlier], route):
                same = _methods_cover(route, routes[earlier]) and _paths_cover(
                    route, routes[earlier], probes[earlier]
                )
                raise ConfigError(_unreachable(limits, earlier, later, same))
            methods |= routes[earlier].methods or set()
        if route.methods is not None and route.methods <= methods:
            between = [e for e in wider if route.methods & (routes[e].methods or set())]
            raise ConfigError(_unreachable_between(limits, between, later))
        if found is not None:
            literal = "" if route.regex is None else limits[later].path.partition("{")[0]
            starting.setdefault(literal, []).append(later)
    return routes


def _common_start(texts: Sequence[str]) -> str:
    """The characters every one of ``texts`` starts with."""
    first, last = min(texts), max(texts)  # the others lie between: they share its start
    size = next(
        (i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first)
    )
    return first[:size]


def _methods_cover(earlier: Route, later: Route) -> bool:
    """Whether ``earlier`` takes every method ``later`` takes (None: every method)."""
    return earlier.methods is None or (
        later.methods is not None and later.methods <= earlier.methods
    )


def _paths_cover(earlier: Route, later: Route, probes: tuple[str, ...] | None) -> bool:
    """Whether ``earlier`` matches every path ``later`` matches (``probes``: the later
    pattern's probe paths; None: not known, so not covered)."""
    if earlier.regex is None:  # every path
        return True
    if later.regex is None or probes is None:
        return False
    return all(earlier.regex.match(probe) is not None for probe in probes)


def _unreachable(limits: Sequence[Limit], earlier: int, later: int, same: bool) -> str:
    head = (
        f"limits[{later}], {_shown(limits[later])}, can never decide a request: "
        f"limits[{earlier}], {_shown(limits[earlier])}, comes first and "
    )
    if same:  # moving one before the other would not help
        return head + "both match the same requests: remove one, or give one Limit both rules"
    return head + (
        "matches every request it matches (the first matching Limit decides); put "
        f"limits[{later}], the narrower, before limits[{earlier}], or narrow "
        f"limits[{earlier}]'s methods"
    )


def _unreachable_between(limits: Sequence[Limit], between: Sequence[int], later: int) -> str:
    named = [f"limits[{index}], {_shown(limits[index])}," for index in between]
    return (
        f"limits[{later}], {_shown(limits[later])}, can never decide a request: "
        f"{', '.join(named[:-1])} and {named[-1]} come first and match every request it "
        f"matches between them, each some of its methods (the first matching Limit "
        f"decides); put limits[{later}] before them, or remove it"
    )


def _shown(limit: Limit) -> str:
    """The Limit as its author wrote its path and methods."""
    methods = "" if limit.methods is None else f", methods={sorted(limit.methods)!r}"
    return f"Limit({limit.path!r}{methods})"


def checked_limits(limits: object) -> tuple[Limit, ...]:
    """``limits`` as given to a middleware: a list of :class:`Limit`, or a ConfigError
    naming what came instead."""
    if isinstance(limits, Iterable) and not isinstance(limits, (str, bytes, Limit)):
        items = tuple(limits)
        found = tuple(item for item in items if isinstance(item, Limit))
        if len(found) == len(items):
            return found
    one = ": one Limit goes in a list" if isinstance(limits, Limit) else ""
    raise ConfigError(
        "limits= takes a list of Limit (limits=[Limit('/x', '5/minute')]), got "
        f"{shown(limits, 80)}{one}"
    )
