"""Flask's ``FREQGUARD_APPLICATION_LIMITS``: one budget for the whole app (Flask-Limiter's
``application_limits``), keyed by the extension's key, which every request to a route
counts, but an exempt view's (``@fg.exempt``, a view of an exempt blueprint) and static
files'. It is a policy of its own (``flask-application``, a name no route's policy,
``flask.<endpoint>``, takes: a view named ``application`` has its own), hit after the
route's own limits: a refusal by either gives back what the other took, as a ``name=``
budget's does. A request no route matches (a 404) counts in neither.

Which requests a view's cap counts is held here too: one on ``methods=`` that no route of
its view serves (``methods=["POST"]`` on a GET route) would count none, the route uncapped
without a word (Flask-Limiter lets it pass so), and is refused.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask

from freqguard.errors import ConfigError
from freqguard.integrations._decide import KeyedRules, Route
from freqguard.integrations._flask_habits import default_limits
from freqguard.integrations._http import KeyFunc

__all__ = [
    "APPLICATION",
    "SETTING",
    "application_route",
    "check_served",
    "counted",
    "static_files",
]

APPLICATION = "flask-application"
SETTING = "FREQGUARD_APPLICATION_LIMITS"


def application_route(given: object, key: KeyFunc) -> Route | None:
    """The app's budget (None: the setting is not given), checked as ``init_app`` runs.

    Raises:
        ConfigError: naming the setting and the rate or rule at fault.
    """
    rates = default_limits(given, key, SETTING)
    return Route(APPLICATION, (KeyedRules(key, rates, "app"),)) if rates else None


def static_files(app: Flask, endpoint: str) -> bool:
    """Whether ``endpoint`` serves an app's or a blueprint's static files (uncapped, as
    Flask-Limiter leaves them)."""
    owner, _, last = endpoint.rpartition(".")
    files = app.blueprints.get(owner) if owner else app
    return last == "static" and files is not None and files.has_static_folder


def counted(app: Flask, endpoint: str) -> bool:
    """Whether a request to ``endpoint`` counts in the app's budget: not a static file's,
    not an exempt view's, nor a view's of an exempt blueprint (or one nested in it)."""
    if static_files(app, endpoint):
        return False
    if getattr(app.view_functions.get(endpoint), "_freqguard_exempt", False):
        return False
    name = endpoint.rpartition(".")[0]
    while name:  # as Flask's request.blueprints, innermost first
        if getattr(app.blueprints.get(name), "_freqguard_exempt", False):
            return False
        name = name.rpartition(".")[0]
    return True


def check_served(
    app: Flask, endpoint: str, methods: frozenset[str], same_cap: Callable[[str], bool]
) -> None:
    """Refuse a cap on ``methods`` that no route of its view serves.

    Args:
        endpoint: the endpoint whose route is being built.
        methods: the cap's methods (upper case; GET brought HEAD).
        same_cap: whether another endpoint runs the same cap (one view on several
            endpoints: the cap holds where any of them serves one of its methods).

    Raises:
        ConfigError: naming the methods, the endpoint and the methods it serves.
    """
    served = _served(app, endpoint)
    if served is None or served & methods:
        return
    for other in app.view_functions:
        if other != endpoint and same_cap(other):
            found = _served(app, other)
            if found is None or found & methods:
                return  # counted there
    raise ConfigError(
        f"@fg.capped(..., methods={sorted(methods - {'HEAD'} or methods)}) never counts a "
        f"request: route {endpoint!r} serves {', '.join(sorted(served))}, and would go "
        "uncapped; name a method it serves (GET brings HEAD), add the method to its "
        "@app.route(methods=[...]), or leave methods= out"
    )


def _served(app: Flask, endpoint: str) -> set[str] | None:
    """The methods the rules of ``endpoint`` serve (None: any method, or no rule)."""
    try:
        rules = list(app.url_map.iter_rules(endpoint))
    except KeyError:  # a view without a URL rule: no request reaches it
        return None
    served: set[str] = set()
    for rule in rules:
        if rule.methods is None:
            return None
        served |= rule.methods
    return served or None
