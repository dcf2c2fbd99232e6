"""``freqguard.E007``, a system check: one budget given two sets of rules, which a request
meets as a ``ConfigError`` (a 500) once the other set is registered: the caps of two views
naming one budget (``@capped(name="otp")``) with different rules, or two freqguard DRF
throttles reading one scope at different rates (their own ``rate``, or one's own and
``DEFAULT_THROTTLE_RATES``'). One error a budget, naming each set's rules and views. A
throttle whose own code gives its rate is not judged; a rate that does not parse is E003's.
The views come from the walk of the URLconf (:mod:`freqguard.integrations._drf_walk`).
And where the middleware stands (:func:`middleware_checks`): ``freqguard.W006`` default
limits that nothing applies, ``freqguard.W007`` a key reading the user before it is known.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings as django_settings
from django.core import checks
from django.utils.module_loading import import_string

from freqguard.errors import ConfigError
from freqguard.integrations._drf_walk import Walk, dotted
from freqguard.integrations._http import check_keyed, client_ip
from freqguard.integrations._request import dimensions_of
from freqguard.integrations._rule_items import check_cost
from freqguard.rates import Rate, parse_rates, written
from freqguard.rules import Rule

__all__ = ["budget_checks", "cost_checks", "middleware_checks"]

_SHOWN = 3  # the views a set names; the others it counts
_UNKNOWN = "key"  # a key's dimensions, known only from a request
_PEER = client_ip()  # the key without FREQGUARD_KEY (the Django integration's, alike)
_MIDDLEWARE = ("freqguard.integrations.django", "FreqGuardMiddleware")


def budget_checks(
    walked: Walk, rates: object, coded: Callable[[type], bool]
) -> list[checks.CheckMessage]:
    """E007 (see the module): ``rates`` is ``DEFAULT_THROTTLE_RATES``, ``coded`` whether a
    throttle's own code may give its rate."""
    named: dict[str, dict[object, list[str]]] = {}
    for where, cap in walked.named:
        made = _as_run(cap)
        if made is not None:
            named.setdefault(cap.name, {}).setdefault(made, []).append(where)
    scoped: dict[str, dict[object, list[str]]] = {}
    for use in walked.uses:
        if not isinstance(use.scope, str) or coded(use.throttle):
            continue
        text = getattr(use.throttle, "rate", None)
        if text is None and isinstance(rates, Mapping):
            text = rates.get(use.scope)
        try:
            parsed = tuple(parse_rates(text)) if isinstance(text, str) else None
        except ConfigError:  # E003's
            continue
        if parsed is not None:
            given = scoped.setdefault(use.scope, {}).setdefault(parsed, [])
            given.append(f"{use.view} by {dotted(use.throttle)}")
    found = [
        _error(
            f"the caps naming the budget {name!r}",
            sets,
            "give them one rate, or names of their own",
        )
        for name, sets in named.items()
        if len(sets) > 1
    ]
    found += [
        _error(
            f"the throttles of scope {scope!r}",
            sets,
            "give them one rate (the scope's "
            "in DEFAULT_THROTTLE_RATES, their own rate unset), or scopes of their own",
        )
        for scope, sets in scoped.items()
        if len(sets) > 1
    ]
    return found


def _as_run(cap: Any) -> tuple[object, ...] | None:
    """The rules a cap's budget is registered with, as the requests make them: its rates,
    and its Rules keyed by nothing, keyed by its key's dimensions (``"2/minute"`` and
    ``Rule("2/minute")`` alike); a key whose dimensions are known only from a request by
    the key itself. None: not judged (a rule its key cannot take, an error of its own)."""
    key = cap.key or getattr(django_settings, "FREQGUARD_KEY", None) or _PEER
    given = dimensions_of(key)
    try:
        rules = check_keyed("", cap.items, given or (_UNKNOWN,))
    except ConfigError:
        return None
    return tuple(rules) if given is not None else (key, *rules)


def _error(what: str, sets: Mapping[object, list[str]], fix: str) -> checks.CheckMessage:
    shown = "; ".join(f"{_rules(rules)} for {_views(views)}" for rules, views in sets.items())
    return checks.Error(
        f"{what} give it different rules, {shown}: a request meets the other's as a "
        f"ConfigError (a 500) once one is registered; {fix}",
        id="freqguard.E007",
    )


def _rules(rules: object) -> str:
    items = rules if isinstance(rules, tuple) else (rules,)
    shown = (_shown(r) for r in items if isinstance(r, (Rate, Rule)))
    return ", ".join(shown)


def _shown(rule: Rate | Rule) -> str:
    if isinstance(rule, Rate):
        return written(rule)
    by = f" by {', '.join(rule.by)}" if rule.by and rule.by != (_UNKNOWN,) else ""
    return f"{written(rule.rate)}{by}"


def _views(views: Sequence[str]) -> str:
    more = f" and {len(views) - _SHOWN} more" if len(views) > _SHOWN else ""
    return ", ".join(views[:_SHOWN]) + more


def cost_checks(walked: Walk) -> list[checks.CheckMessage]:
    """``freqguard.E008``: a view's cap whose cost the default limits it is decided with
    (by the middleware, when it is installed) cannot hold (charged to them too, in one
    hit): every request to it refused, for ever. Default limits that do not parse are
    E002's."""
    if getattr(django_settings, "FREQGUARD_ENABLED", True) is False:
        return []  # switched off: nothing is charged
    if not any(map(_ours, getattr(django_settings, "MIDDLEWARE", ()))):
        return []  # no middleware decides a view with the default limits: each cap alone
    text = getattr(django_settings, "FREQGUARD_DEFAULT_LIMITS", None)
    try:
        defaults = tuple(parse_rates(text)) if isinstance(text, str) and text else ()
    except ConfigError:
        return []
    found: list[checks.CheckMessage] = []
    for where, cap in walked.costly if defaults else ():
        try:
            check_cost(cap.cost, (*defaults, *cap.items), f"{where}: ")
        except ConfigError as error:
            text = f"{error} (FREQGUARD_DEFAULT_LIMITS is charged its cost too)"
            found.append(checks.Error(text, id="freqguard.E008"))
    return found


def _ours(path: object) -> bool:
    """Whether the middleware ``path`` names is freqguard's, or made from it (a subclass,
    or the class under another module's name), told by the names in its MRO (as Django
    imports it: one that does not import is Django's own check's)."""
    return _is(path, _MIDDLEWARE)


def _is(path: object, named: tuple[str, str]) -> bool:
    """Whether the class ``path`` names is ``named`` (module, name), or made from it."""
    if path == ".".join(named):  # as written: whether or not it imports here
        return True
    try:
        found = import_string(path) if isinstance(path, str) else None
    except Exception:
        return False
    mro = getattr(found, "__mro__", ())
    return any((c.__module__, c.__name__) == named for c in mro)


_AUTH = ("django.contrib.auth.middleware", "AuthenticationMiddleware")


def middleware_checks(walked: Walk, fallen: bool) -> list[checks.CheckMessage]:
    """``freqguard.W006``: ``FREQGUARD_DEFAULT_LIMITS`` set, and neither freqguard's
    middleware (a subclass, or under another module's name, alike) nor a freqguard DRF
    throttle without a rate of its own (``fallen``: it falls back on them) to apply them.
    ``freqguard.W007``: the middleware before ``AuthenticationMiddleware`` while
    ``FREQGUARD_KEY``, or a cap it decides, keys by the user: every request is keyed as
    anonymous, by its address."""
    stack = list(getattr(django_settings, "MIDDLEWARE", None) or ())
    ours = [i for i, path in enumerate(stack) if _ours(path)]
    found: list[checks.CheckMessage] = []
    if getattr(django_settings, "FREQGUARD_DEFAULT_LIMITS", None) and not (ours or fallen):
        text = (
            "FREQGUARD_DEFAULT_LIMITS is set, but freqguard.integrations.django."
            "FreqGuardMiddleware is not in MIDDLEWARE (nor a freqguard DRF throttle seen to "
            "read them): the default limits cap no view; add the middleware, after "
            "AuthenticationMiddleware"
        )
        found.append(checks.Warning(text, id="freqguard.W006"))
    auth = [i for i, path in enumerate(stack) if _is(path, _AUTH)]
    key = getattr(django_settings, "FREQGUARD_KEY", None)
    users = [where for where, _ in walked.users]
    if getattr(key, "needs_user", False):
        users.insert(0, "FREQGUARD_KEY")
    if ours and auth and ours[0] < auth[0] and users:
        text = (
            f"freqguard's middleware is placed before AuthenticationMiddleware, and "
            f"{_views(users)} key by request.user: every request is keyed as anonymous "
            "(by its address); place the middleware after it"
        )
        found.append(checks.Warning(text, id="freqguard.W007"))
    return found
