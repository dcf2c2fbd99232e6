"""A middleware's Limits in order: the first matching one decides a request, and a Limit that
an earlier one wholly covers, which could never decide one, is refused when they are compiled.

Covering is decided soundly: an earlier route covers a later one when its methods take all
the later one's (None: every method; GET brings HEAD) and it matches each of the later
pattern's probe paths (:func:`~freqguard.integrations._routes.probe_paths`: its parameters
given unusual values of their convertors, three different ones). A partial overlap
(``/items/special`` before ``/items/{id}``) is first match wins, by design, and allowed. A
pattern with an application's own convertor has no probes: it is never refused, and never
taken to cover another.
"""

from __future__ import annotations

from collections.abc import Sequence

from freqguard.errors import ConfigError
from freqguard.integrations._decide import Route, compile_limit
from freqguard.integrations._http import Limit
from freqguard.integrations._routes import probe_paths

__all__ = ["compile_limits"]


def compile_limits(limits: Sequence[Limit]) -> list[Route]:
    """Each Limit as a :class:`Route`, in order: the first matching one decides a request.

    Raises:
        ConfigError: a Limit that can never decide a request, because an earlier one
            matches every request it matches; both named, with their places in ``limits``.
    """
    routes = [compile_limit(limit) for limit in limits]
    probes = [probe_paths(limit.path) for limit in limits]
    for later, route in enumerate(routes):
        for earlier in range(later):
            # an earlier pattern with an application's own convertor (no probes of its
            # own) covers nothing: its values are unknown, and all three probes of the
            # later one may fall in them by chance (at most 64 characters, no dot first)
            if probes[earlier] is not None and _covers(routes[earlier], route, probes[later]):
                same = _covers(route, routes[earlier], probes[earlier])
                raise ConfigError(_unreachable(limits, earlier, later, same))
    return routes


def _covers(earlier: Route, later: Route, probes: tuple[str, ...] | None) -> bool:
    """Whether ``earlier`` matches every request ``later`` matches (``probes``: the later
    pattern's probe paths; None: not known, so not covered)."""
    if earlier.methods is not None and (
        later.methods is None or not later.methods <= earlier.methods
    ):
        return False
    if earlier.regex is None:  # every path
        return True
    if later.regex is None or probes is None:
        return False
    return all(earlier.regex.match(probe) for probe in probes)


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


def _shown(limit: Limit) -> str:
    """The Limit as its author wrote its path and methods."""
    methods = "" if limit.methods is None else f", methods={sorted(limit.methods)!r}"
    return f"Limit({limit.path!r}{methods})"
