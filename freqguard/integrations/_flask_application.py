"""Flask's ``FREQGUARD_APPLICATION_LIMITS``: one budget for the whole app (Flask-Limiter's
``application_limits``), keyed by the extension's key, which every request to a route
counts, but an exempt view's (``@fg.exempt``, a view of an exempt blueprint) and static
files'. It is a policy of its own (``flask-application``, a name no route's policy,
``flask.<endpoint>``, takes: a view named ``application`` has its own), hit after the
route's own limits: a refusal by either gives back what the other took, as a ``name=``
budget's does. A request no route matches (a 404) counts in neither.
"""

from __future__ import annotations

from flask import Flask

from freqguard.integrations._decide import KeyedRules, Route
from freqguard.integrations._flask_habits import default_limits
from freqguard.integrations._http import KeyFunc

__all__ = ["APPLICATION", "SETTING", "application_route", "counted", "static_files"]

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
