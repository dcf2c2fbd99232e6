"""The route a freqguard DRF throttle decides a request on: its budget's policy (named by
its scope, its class's ``get_cache_key``, or its class and view), the rules its rates make,
and when that policy is registered again.

A throttle whose rate is fixed by its class or the settings registers its rates' rules
(named by their rates, ``sl.3.60s``), and again when they change (a setting changed: a
deploy of the policy). A throttle whose own code gives its rate per request
(:func:`~freqguard.integrations._drf_rates.per_request`: a user's plan) registers rules
named by its scope, whose rates are tiers read from each hit's context, once (again only
for more rates than before, or another strategy): two plans deciding at once are each
decided at their own rates, on one budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from freqguard.integrations._decide import KeyedRules, Route
from freqguard.integrations._django_state import State
from freqguard.integrations._drf_rates import (
    PER_REQUEST,
    grown,
    per_request,
    rate_text,
    rules_of,
    tiered,
)
from freqguard.integrations._request import KeyFunc
from freqguard.rates import Rate
from freqguard.rules import fit_name

__all__ = ["budget", "route_of"]


def budget(throttle: Any, view: Any) -> tuple[str, str]:
    """The policy a throttle counts on, and the name of its rules when its rate is the
    request's: its scope's (``drf.<scope>``, one budget for every view using it), else
    its class's, whose own ``get_cache_key`` string is the budget on every view, else its
    class's on this view's."""
    cls = type(throttle)
    if throttle.scope is not None:
        return f"drf.{throttle.scope}", throttle.scope
    if getattr(cls, "get_cache_key", None) is not None:  # its string the budget
        return f"drf.{cls.__module__}.{cls.__qualname__}", cls.__name__
    owner = type(view)
    return f"drf.{cls.__name__}.{owner.__module__}.{owner.__name__}", cls.__name__


def route_of(
    state: State,
    throttle: Any,
    view: Any,
    rates: tuple[Rate, ...],
    where: str,
    keyed: Callable[[], KeyFunc],
) -> tuple[Route, str | None]:
    """The route ``throttle`` decides on at ``rates`` (given at ``where``; ``keyed``: its
    key function), made and registered anew when needed, and the text of its rates the hit
    carries when they are the request's own (None: the route's rules have them).

    Raises:
        ConfigError: a rate its strategy cannot hold, naming the class's ``strategy``.
    """
    cls: type = type(throttle)
    # a rate per request: the class's own code gives it, or the instance has its own (a
    # view's get_throttles() set it); a class used both ways is two sources, refused
    strategy, tiers = throttle.strategy, per_request(cls) or "rate" in vars(throttle)
    name, label = budget(throttle, view)
    source = where  # who gives the rules (named when two give one policy two)
    if tiers:  # decided at the request's rates: rules registered once, by one source for
        rules_of(rates, strategy, cls, where)  # every such throttle of the scope
        source = PER_REQUEST
    if strategy is not None:  # its rules are the class's too: two classes counting one
        # scope two ways are two sets of rules, refused as two rates
        source = f"{source} on {cls.__qualname__}.strategy = {strategy!r}"
    # its policy registered again when what it was last registered by changed (by this
    # throttle or another of the scope): its rates; for a rate per request, how many
    last = state.throttled.get(name)
    count = grown(rates, strategy, last) if tiers else len(rates)
    mark = (count, strategy) if tiers else rates
    found = state.throttles.get((cls, name))
    if found is None or found[1] != mark or last != mark:
        rules = tiered(count, strategy, label) if tiers else rules_of(rates, strategy, cls, where)
        made = Route(fit_name(name), (KeyedRules(keyed(), rules),), throttle.cost)
        if found is not None:  # replaced: what the process holds stays bounded
            state.forget(found[0])
        found = state.throttles[(cls, name)] = (state.remember(made, source), mark)
        state.throttled[name] = mark
    return found[0], rate_text(rates) if tiers else None
