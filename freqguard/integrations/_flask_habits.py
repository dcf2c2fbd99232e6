"""What people coming from Flask-Limiter write to the Flask extension (``Limiter(...)``'s
and ``limit()``'s arguments, its methods), refused naming freqguard's way
(docs/coming-from/flask-limiter.md maps each idiom): a bare ``TypeError`` or
``AttributeError`` would leave them to guess it. And the extension's settings: an unknown
``FREQGUARD_*`` key refused naming the one meant, Flask-Limiter's ``RATELIMIT_*`` warned of."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from flask import Blueprint, Flask

from freqguard.errors import ConfigError, shown
from freqguard.guard import Guard
from freqguard.integrations._http import KeyFunc, RequestInfo, check_keyed, client_ip
from freqguard.integrations._request import declared, dimensions_of
from freqguard.integrations._rule_items import rule_items
from freqguard.integrations._settings import (
    COMMON,
    MEANT,
    peer_setting,
    unknown_setting,
)
from freqguard.policy import Policy
from freqguard.rates import Rate
from freqguard.rules import Rule

__all__ = [
    "CapHabits",
    "check_limited",
    "check_once",
    "check_settings",
    "check_started",
    "default_limits",
    "refuse_attribute",
    "refuse_exempt",
    "refuse_theirs",
    "the_app",
]

_log = logging.getLogger("freqguard")

#: where each idiom's row is
_PAGE = "docs/coming-from/flask-limiter.md"


#: Flask-Limiter's ``limit()`` arguments, and freqguard's way for each.
_THEIRS = {
    "per_method": "each method its own budget: key=lambda request: "
    "{**remote_address(request), 'method': request.method} (from "
    "freqguard.integrations.flask import remote_address, the default key)",
    "key_func": "key= here, a function of the request (client_ip(), header(...))",
    "exempt_when": "raise SkipRequest in the key function for a request left uncapped",
    "override_defaults": "a view's caps go beside the default limits; @fg.exempt over the "
    "cap leaves them out, as override_defaults=True does (on a Blueprint's cap, "
    "defaults=True keeps them, as override_defaults=False)",
    "error_message": "the answer is @app.errorhandler(CapExceeded)'s",
    "on_breach": "a refusal is CapExceeded: @app.errorhandler(CapExceeded)",
    "scope": "name= here: a budget shared by every view naming it",
    "meta_limits": "no limit on breaches: hit a second policy in your "
    "@app.errorhandler(CapExceeded)",
}


def refuse_theirs(given: Mapping[str, object]) -> None:
    """Flask-Limiter's ``limit()`` arguments, refused naming freqguard's way.

    Raises:
        ConfigError: for one of them; TypeError for any other name, as Python would.
    """
    for name in given:
        if name in _THEIRS:
            raise ConfigError(f"Flask-Limiter's {name}= is not capped()'s: {_THEIRS[name]}")
        raise TypeError(f"capped() got an unexpected keyword argument {name!r}")


class CapHabits:
    """What ``fg.capped(...)`` answers to Flask-Limiter's ways with ``limit(...)`` beyond
    its arguments: ``with limiter.limit("10/second"):`` (a block of a view capped)."""

    __slots__ = ()

    if not TYPE_CHECKING:  # mypy refuses it itself

        def __enter__(self) -> NoReturn:
            raise ConfigError(
                "Flask-Limiter's `with limiter.limit(...):` (a block of a view capped) is not "
                "fg.capped's: put the block in a function the view calls and cap that, "
                "@fg.capped(...) on it (capped on its own; a denial is a 429), or hit a "
                f"policy yourself, FreqGuard.guard_of(app).hit(...) ({_PAGE})"
            )

        def __exit__(self, *exc: object) -> None:  # a with statement asks for both
            """Never reached: :meth:`__enter__` refuses."""


def refuse_exempt(target: object, given: Mapping[str, object]) -> None:
    """Flask-Limiter's ``exempt(flags=...)`` and bare ``exempt()``, refused naming what
    ``@fg.exempt`` leaves out.

    Raises:
        ConfigError: for ``flags=`` or no target; TypeError for any other name, as Python
            would.
    """
    for name in given:
        if name != "flags":
            raise TypeError(f"exempt() got an unexpected keyword argument {name!r}")
        raise ConfigError(
            "Flask-Limiter's flags= is not exempt()'s: @fg.exempt leaves a view out of the "
            "default limits and of the caps of the blueprints around it (its blueprint's "
            "too: a view that is to keep them is left unexempt), fg.exempt(blueprint) the "
            f"views of the blueprints nested in it as well ({_PAGE}, the exempt row)"
        )
    if target is None:
        raise ConfigError(
            "@fg.exempt takes the view or the Blueprint itself: write @fg.exempt, without "
            "parentheses (Flask-Limiter's @limiter.exempt() returns a decorator)"
        )


#: Flask-Limiter's ``Limiter(...)`` arguments, and freqguard's way for each.
_LIMITERS = {
    "key_func": "a key function takes the request here: FreqGuard(app, key=client_ip()) "
    "(the default, remote_address, is get_remote_address's)",
    "default_limits": 'app.config["FREQGUARD_DEFAULT_LIMITS"] = "2/minute; 100/hour" (one '
    "string; each route its own budget, as there)",
    "storage_uri": 'app.config["FREQGUARD_BACKEND"] = "redis://..." (or guard=Guard(backend))',
    "storage_options": "make the backend yourself: FreqGuard(app, guard=Guard(backend))",
    "headers_enabled": 'app.config["FREQGUARD_HEADERS"] = "x-ratelimit" (the headers are '
    'always sent; "ietf", the default, or "none")',
    "enabled": 'fg.enabled = False, or app.config["FREQGUARD_ENABLED"] = False',
    "on_breach": "a refusal is CapExceeded: answer it with @app.errorhandler(CapExceeded)",
    "strategy": 'a strategy is a rule\'s: Rule("2/minute", strategy=...) (the default, the '
    "sliding log, is exact in any window)",
    "application_limits": 'app.config["FREQGUARD_APPLICATION_LIMITS"] = "1000/hour" (one '
    "budget for the whole app; exempt views and static files left out)",
    "swallow_errors": "the store failing is the guard's on_error: guard=Guard(backend, "
    'on_error="allow") fails open',
    "in_memory_fallback": "a fallback store is the guard's on_error: "
    "guard=Guard(backend, on_error=fallback_backend)",
    "in_memory_fallback_enabled": "a fallback store is the guard's on_error: "
    "guard=Guard(backend, on_error=fallback_backend)",
    "default_limits_exempt_when": "raise SkipRequest in key= for a request left uncapped",
    "key_prefix": "the records' prefix is the guard's: guard=Guard(backend, prefix='myapp')",
    "default_limits_per_method": "each method its own budget: FreqGuard(app, key=lambda "
    "request: {**remote_address(request), 'method': request.method})",
    "default_limits_deduct_when": "deduct_when= is a view cap's: @fg.capped(..., "
    "deduct_when=...) (the default limits count every request)",
    "default_limits_cost": "a request's cost is its view cap's: @fg.capped(..., cost=2) "
    "(the default limits count 1 a request)",
    "application_limits_per_method": "a Limit per method: Limit(..., methods=['POST'])",
    "application_limits_exempt_when": "raise SkipRequest in the Limit's key=",
    "application_limits_deduct_when": "no deduct_when on the WSGI middleware's Limit: cap "
    "the view instead, @fg.capped(..., deduct_when=...)",
    "application_limits_cost": "the WSGI middleware's Limit(..., cost=2)",
    "header_name_mapping": "the headers are a profile, their names fixed: FREQGUARD_HEADERS "
    '= "x-ratelimit", "draft6" or "ietf"',
    "retry_after": "Retry-After is sent in seconds with every 429 (no HTTP date)",
    "meta_limits": "no limit on breaches: hit a second policy in your "
    "@app.errorhandler(CapExceeded)",
    "on_meta_breach": "no limit on breaches: hit a second policy in your "
    "@app.errorhandler(CapExceeded)",
    "fail_on_first_breach": "every rule of a route is decided at once, and a denial counts "
    "in none of them",
    "auto_check": "every request is decided before its view; a cap inside a view is "
    "@fg.capped on a function it calls",
    "request_identifier": "the key names the caller: key=, a function of the request",
}


def the_app(app: object, theirs: Mapping[str, object]) -> Flask | None:
    """The app ``FreqGuard(...)`` was given (first, or as ``app=``), Flask-Limiter's
    ``Limiter(...)`` habits refused naming freqguard's way.

    Raises:
        ConfigError: one of ``Limiter``'s arguments, or an app that is not a Flask app (a
            key function first: ``Limiter(get_remote_address, app=app)``).
        TypeError: the app given twice, or any other argument, as Python would.
    """
    for name in theirs:
        if name in _LIMITERS:
            raise ConfigError(
                f"Flask-Limiter's {name}= is not FreqGuard's: {_LIMITERS[name]} ({_PAGE})"
            )
        if name != "app":
            raise TypeError(f"FreqGuard() got an unexpected keyword argument {name!r}")
    if callable(app) and not isinstance(app, Flask):
        given = getattr(app, "__qualname__", None) or repr(app)
        raise ConfigError(
            f"FreqGuard's first argument is the Flask app, got the function {given}: "
            "Limiter(get_remote_address, app=app) is FreqGuard(app) here, and a key function "
            "goes in key=, taking the request: FreqGuard(app, key=client_ip()) (the default "
            f"key, remote_address, is get_remote_address's; {_PAGE}, the Limiter(...) row)"
        )
    if "app" in theirs:
        if app is not None:
            raise TypeError("FreqGuard(): app given twice, first and as app=")
        app = theirs["app"]
    if app is not None and not isinstance(app, Flask):
        raise ConfigError(
            "FreqGuard's first argument is the Flask app (or None, to call init_app "
            f"later), got {shown(app)}"
        )
    return app


#: Flask-Limiter's ``Limiter`` methods, and freqguard's way for each.
_METHODS = {
    "limit": '@fg.capped("3/minute") under @app.route, or fg.capped(...)(blueprint)',
    "shared_limit": '@fg.capped("3/minute", name="s") on each view: one budget for the views '
    "naming it",
    "request_filter": "a key function that raises SkipRequest: the request is left uncapped",
    "reset": "guard.reset(policy, **key) forgets one key's counts (a test: a Guard of its "
    "own, Guard(MemoryBackend()))",
    "current_limit": "the response's RateLimit headers (FREQGUARD_HEADERS), and "
    "CapExceeded.decision in a 429's @app.errorhandler",
}


def refuse_attribute(owner: object, name: str) -> NoReturn:
    """``fg.<name>``, which FreqGuard does not have: Flask-Limiter's methods named with
    freqguard's way.

    Raises:
        AttributeError: always.
    """
    found = f"'{type(owner).__name__}' object has no attribute {name!r}"
    if name in _METHODS:
        found += f": Flask-Limiter's {name}() is {_METHODS[name]} here ({_PAGE})"
    raise AttributeError(found, name=name, obj=owner)


#: The extension's settings (freqguard/integrations/_settings.py); what people coming from
#: Flask-Limiter type instead.
_SETTINGS = COMMON | {"FREQGUARD_APPLICATION_LIMITS"}
_MEANT = {
    **MEANT,
    "RATELIMIT_APPLICATION": "FREQGUARD_APPLICATION_LIMITS",
    "FREQGUARD_APPLICATION_LIMIT": "FREQGUARD_APPLICATION_LIMITS",
    "RATELIMIT_DEFAULT": "FREQGUARD_DEFAULT_LIMITS",
    "RATELIMIT_STORAGE_URI": "FREQGUARD_BACKEND",
    "RATELIMIT_STORAGE_URL": "FREQGUARD_BACKEND",
    "RATELIMIT_ENABLED": "FREQGUARD_ENABLED",
    "RATELIMIT_HEADERS_ENABLED": "FREQGUARD_HEADERS",
}
#: Flask-Limiter's other settings (each a ``Limiter`` argument's), and freqguard's way.
_WAYS = {
    **{f"RATELIMIT_{name.upper()}": way for name, way in _LIMITERS.items()},
    "RATELIMIT_DEFAULTS_EXEMPT_WHEN": _LIMITERS["default_limits_exempt_when"],
}


def default_limits(
    given: object, key: KeyFunc, setting: str = "FREQGUARD_DEFAULT_LIMITS"
) -> tuple[Rate | Rule, ...]:
    """``FREQGUARD_DEFAULT_LIMITS`` (a rate string, or a list of them and Rules) as every
    route's policy will hold them (or ``setting``'s, ``FREQGUARD_APPLICATION_LIMITS``, as
    the app's), checked at ``init_app`` (not a 500 at each request): keyed by the
    extension's key (a Rule keyed by a dimension it does not give is refused), and a policy
    (a Rule for some priorities only: these limits have none).

    Raises:
        ConfigError: naming the setting and the rule.
    """
    try:
        defaults = rule_items(given, setting, False) if given else ()
    except ConfigError as exc:  # a rate that does not parse: named by the setting too
        if setting in str(exc):
            raise
        raise ConfigError(f"{setting}: {exc}") from None
    known = dimensions_of(key)
    if known is not None and defaults:
        rules = check_keyed(setting, defaults, known)
        try:
            Policy("flask.defaults", *rules)
        except ConfigError as exc:
            raise ConfigError(f"{setting}: {exc}") from None
    return defaults


def check_once(app: Flask, extension: object) -> None:
    """Refuse to set ``app`` up twice (``init_app`` after ``FreqGuard(app)``, or a second
    FreqGuard): each time adds the hooks again, and every request would be hit twice
    (Flask-Limiter's ``init_app`` takes an app once).

    Raises:
        ConfigError: naming the app, and whose it is.
    """
    state = app.extensions.get("freqguard")
    if state is not None:
        whose = "this" if getattr(state, "owner", None) is extension else "another"
        raise ConfigError(
            f"app {app.name!r} is set up already by {whose} FreqGuard: one FreqGuard an "
            "app, set up once (FreqGuard(app) calls init_app; in a factory, FreqGuard() "
            "then fg.init_app(app)), else every request is counted twice"
        )


def check_started(blueprint: Blueprint, apps: Iterable[Flask], method: str) -> None:
    """Refuse to cap or exempt a blueprint of an app that has served requests: its routes
    were built at the first request, and the change would pass unseen (Flask-Limiter reads
    a blueprint's limits at each request; Flask itself refuses a route added then).

    Raises:
        ConfigError: naming the blueprint and the app.
    """
    for app in apps:
        state = app.extensions.get("freqguard")
        if getattr(state, "routes", None) and blueprint in app.blueprints.values():
            raise ConfigError(
                f"fg.{method}(blueprint): blueprint {blueprint.name!r} is registered on app "
                f"{app.name!r}, which has served requests already: its routes are built, "
                "and this would never apply; cap or exempt the blueprint before the app's "
                "first request (where it is made, or before register_blueprint)"
            )


def check_settings(settings: Mapping[str, Any]) -> bool:
    """Refuse an unknown ``FREQGUARD_*`` key (naming the one meant), warn of Flask-Limiter's
    ``RATELIMIT_*`` keys (naming freqguard's way; its limits' are :func:`check_limited`'s);
    the app-wide switch.

    Raises:
        ConfigError: an unknown ``FREQGUARD_*`` key, or ``FREQGUARD_ENABLED`` not a bool.
    """
    for key in settings:
        unknown = unknown_setting(key, _SETTINGS, _MEANT)
        if unknown is not None:
            raise ConfigError(unknown)
        theirs = peer_setting(key, "Flask-Limiter", _MEANT, _WAYS, _PAGE)
        if theirs is not None and key not in _LIMITS:  # those: check_limited's
            _log.warning("%s", theirs)
    enabled = settings.get("FREQGUARD_ENABLED", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"FREQGUARD_ENABLED must be True or False, got {shown(enabled)}")
    return enabled


#: Flask-Limiter's settings of limits: alone, the app is wholly uncapped (check_limited)
_LIMITS = ("RATELIMIT_DEFAULT", "RATELIMIT_APPLICATION")


def check_limited(app: Flask, guard: Guard, capped: object, final: bool = False) -> bool:
    """Refuse Flask-Limiter's ``RATELIMIT_DEFAULT`` or ``RATELIMIT_APPLICATION`` on an app
    with no freqguard limit at all once setup is over (``final``: the first request, as
    views and blueprints are capped after ``init_app`` too): freqguard never reads them,
    and every route would go uncapped. Beside freqguard's limits (a migration running
    both), or read by Flask-Limiter set up on the app, they are warned of. Returns whether
    to check again at the first request (none found yet, not ``final``).

    Raises:
        ConfigError: ``final``, naming the setting, its value and freqguard's.
    """
    config = app.config
    limited = (
        bool(capped)  # the extension has capped a view (of any app, so far)
        or bool(config.get("FREQGUARD_DEFAULT_LIMITS"))
        or bool(config.get("FREQGUARD_APPLICATION_LIMITS"))
        or bool(guard.policies)  # a configuration file's, or the guard's own
        or "limiter" in app.extensions  # Flask-Limiter, which reads them
        or any(hasattr(view, "_freqguard_cap") for view in app.view_functions.values())
        or any(getattr(bp, "_freqguard_cap", None) for bp in app.blueprints.values())
    )
    found = [name for name in _LIMITS if name in config]
    if found and not (limited or final):
        return True
    for name in found:
        if limited:
            _log.warning("%s", peer_setting(name, "Flask-Limiter", _MEANT, _WAYS, _PAGE))
            continue
        raise ConfigError(
            f"{name} = {shown(config[name])} is Flask-Limiter's setting, which freqguard never "
            f"reads, and app {app.name!r} has no freqguard limit at all (no "
            "FREQGUARD_DEFAULT_LIMITS, FREQGUARD_APPLICATION_LIMITS, nor a view or blueprint "
            f"capped by its first request): every route would go uncapped; write "
            f"{_MEANT[name]} = {shown(config[name])} ({_PAGE})"
        )
    return False


_peer = client_ip()


def remote_address(request_info: RequestInfo) -> dict[str, object]:
    """The peer address as Flask sees it, normalised as :func:`client_ip` does (IPv6 by
    its /64). Behind proxies use ``client_ip(trusted_proxies, header=...)`` instead."""
    return _peer(request_info)  # type: ignore[return-value]


declared(remote_address, "client")  # the key of the default limits, checked at init_app
