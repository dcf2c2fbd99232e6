"""What freqguard's DRF throttles read, known before a request: the system checks of what
they would read (where, :mod:`~freqguard.integrations._drf_rates` says), in
``DEFAULT_THROTTLE_RATES`` and on the views of the URLconf that name them:

* ``freqguard.E003``: a rate that does not parse, read by a freqguard throttle (a default
  class, or one a view names); ``W002`` when no freqguard throttle is seen to read it. One
  error a rate (a scope's, or a throttle's own), naming how many views read it and the
  first few. And one a view's throttle reads that parses but its strategy cannot hold (the
  sliding log's, past 10,000), naming the views and the class's ``strategy`` to set.
* ``freqguard.W005``: a view's freqguard throttle reads a scope no rate names, one close to
  it named (a misspelling, ``upload`` for ``uploads``), and ``FREQGUARD_DEFAULT_LIMITS``
  set: the view takes the default instead, quietly.
* ``freqguard.E004``: a view's freqguard throttle reads a scope (the view's
  ``throttle_scope``, or the throttle's ``scope``) that ``DEFAULT_THROTTLE_RATES`` does not
  name, with no ``FREQGUARD_DEFAULT_LIMITS`` to fall back on: every request to the view
  would fail. One error a view for the view's scope (each view's to fix), one for a
  throttle's own, naming how many views use it and the first few. A throttle whose own
  code (its ``__init__`` or ``allow_request``) may choose the scope is not judged.
* ``freqguard.E005``: a view's ``throttle_classes`` names a throttle by a dotted path, which
  DRF calls as it is (it imports paths only in ``DEFAULT_THROTTLE_CLASSES``): every request
  to the view would fail.
* ``freqguard.E006``: a view's freqguard throttle has neither a ``rate`` nor a ``scope``
  (the generic :class:`~freqguard.integrations.drf.FreqGuardThrottle`), with no
  ``FREQGUARD_DEFAULT_LIMITS`` to read instead: every request to the view would fail. One
  error a throttle class, naming how many views use it and the first few; a throttle whose
  own code (its ``__init__`` or ``allow_request``) may give the rate is not judged.
* ``freqguard.I001``: the views whose throttles ``get_throttles()`` chooses (an override of
  DRF's): the check cannot call it without a request, so it does not judge their
  ``throttle_classes``. One Info for all, and only while freqguard's DRF throttles are
  loaded: the override is DRF's idiom, not a fault, and without them it has none of
  freqguard's to choose.
* ``freqguard.W008``: a view's ``throttle_scope`` none of its throttles reads (no scoped
  throttle among them, nor one deciding in code of its own): the scope's rate applies to
  nothing, as in DRF. Only while freqguard's DRF throttles are loaded.
* ``freqguard.W003``: the walk of the URLconf stopped at its bound, so the views past it
  were not checked.
* ``freqguard.W004``: includes nested deeper than the walk's bound were not descended into
  (the walk goes on past them), so their views were not checked.

The views come from the walk of the URLconf (:mod:`freqguard.integrations._drf_walk`).
And what DRF's counting keeps that freqguard's throttles do not (:data:`NOT_READ`, refused
on a class; :func:`not_kept`, read on an instance), named with freqguard's way.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

from django.conf import settings as django_settings
from django.core import checks

from freqguard.errors import ConfigError, shown
from freqguard.integrations._django_budgets import budget_checks, cost_checks, middleware_checks
from freqguard.integrations._drf_rates import DRF as _DRF
from freqguard.integrations._drf_rates import coded as _coded
from freqguard.integrations._drf_rates import given, own_rates, unheld
from freqguard.integrations._drf_walk import (
    DEEPEST,
    MOST_PATTERNS,
    Use,
    Walk,
    dotted,
    ours,
    walk,
)
from freqguard.rates import parse_rates

__all__ = ["NOT_KEPT", "NOT_READ", "not_kept", "throttle_checks"]

#: The views an error names by name; the others it counts.
_SHOWN = 3
_WHOLE = (
    "DRF read a unit by its first letter; freqguard's throttles read it whole "
    "('3/minute', '100/h', '5/min')"
)


#: DRF's recipe for a rate per request (a user's plan) sets the rate and parses it.
_PER_REQUEST = (
    "a rate per request (a user's plan): set self.rate in allow_request (or return it from "
    "get_rate()) and nothing else: freqguard reads it and decides the request at that rate, "
    "on the scope's one budget"
)

#: What only DRF's own counting reads, and freqguard's way instead.
NOT_READ = {
    "timer": "time is the guard's clock (FREQGUARD_BACKEND=Guard(backend, clock=...))",
    "cache": "the counts are kept in FREQGUARD_BACKEND's store",
    "parse_rate": "a rate is read by freqguard's grammar, DRF's spellings too: give rate, a "
    f"scope's DEFAULT_THROTTLE_RATES, or get_rate() a string; {_PER_REQUEST}",
    "throttle_success": "allow_request decides on the guard; a request's decision is self.decision",
    "throttle_failure": "allow_request decides on the guard; a request's decision is self.decision",
}


#: What DRF's counting keeps on a throttle that a subclass reads after ``allow_request``.
NOT_KEPT = ("num_requests", "duration", "history", "now")


def not_kept(name: str) -> Any:
    """A property of freqguard's throttles for DRF's counting's ``name`` (``num_requests``,
    ``history``...; ``parse_rate``, ``timer``...: :data:`NOT_READ`): read (or called), or
    set (DRF's recipe for a rate per request sets ``num_requests``), an ``AttributeError``
    naming freqguard's way (a property, not ``__getattr__``, which would take the place of
    another property's own error)."""
    way = NOT_READ.get(name) or (
        "DRF's counting is not kept on freqguard's throttles; the request's decision is "
        f"self.decision (remaining, capacity, retry_after); {_PER_REQUEST}"
    )

    def read(throttle: object) -> NoReturn:
        raise AttributeError(
            f"{type(throttle).__qualname__!r} object has no attribute {name!r}: {way}",
            name=name,
            obj=throttle,
        )

    def write(throttle: object, value: object) -> NoReturn:
        raise AttributeError(
            f"{type(throttle).__qualname__!r} object's {name!r} is DRF's, not set on "
            f"freqguard's throttles: {way}",
            name=name,
            obj=throttle,
        )

    return property(read, write)


def throttle_checks() -> list[checks.CheckMessage]:
    """``freqguard.E003``, ``W002``, ``E004``, ``E005``, ``E006``, ``I001``, ``W003``,
    ``W004`` and ``W008`` (see the module), and ``E007``
    (:mod:`~freqguard.integrations._django_budgets`)."""
    rest = getattr(django_settings, "REST_FRAMEWORK", None)
    rest = rest if isinstance(rest, Mapping) else {}
    bad = _bad_rates(rest.get("DEFAULT_THROTTLE_RATES"))
    classes = rest.get("DEFAULT_THROTTLE_CLASSES")
    default = isinstance(classes, (list, tuple)) and any(ours(c) for c in classes)
    walked = walk()
    rates = _drf_rates() if walked.uses or default else {}
    budgets = budget_checks(walked, rates, _coded) + cost_checks(walked)  # E007, E008
    # a freqguard throttle with no rate of its own falls back on the default limits
    defaults = [found for found in map(ours, classes) if found] if default else []  # type: ignore[arg-type]
    fallen = any(
        given(getattr(throttle, "rate", None), scope, rates) is None
        for throttle, scope in [
            # a scoped one's scope is each view's (the walk's uses): not the class's
            *((c, getattr(c, "scope", None)) for c in defaults if not hasattr(c, "scope_attr")),
            *((u.throttle, u.scope) for u in walked.uses),
        ]
    )
    budgets += middleware_checks(walked, fallen)  # W006, W007
    fallback = bool(getattr(django_settings, "FREQGUARD_DEFAULT_LIMITS", None))
    fallback = fallback or getattr(django_settings, "FREQGUARD_ENABLED", True) is False  # off
    found = _of_the_walk(walked)
    # a rate that does not parse is one to fix: one error naming the views that read it
    read: dict[object, list[str]] = {}  # a bad scope: the views reading it
    rated: dict[type, list[Use]] = {}  # a throttle's own rate: the views using it
    # a scope with no rate: the views reading it, one error for a throttle's own scope (one
    # fix), one a view for a view's scope (each view's to fix)
    unnamed: dict[tuple[type, object, str | None], list[Use]] = {}
    unrated: dict[type, list[Use]] = {}  # neither rate nor scope: the views, a throttle's
    unheld_by: dict[str, list[str]] = {}  # a rate its strategy cannot hold: the views
    for use in walked.uses:
        if getattr(use.throttle, "rate", None) is None and own_rates(use.throttle):
            continue  # the settings' rates are not what it reads
        where = given(getattr(use.throttle, "rate", None), use.scope, rates)
        problem = None if where is None else unheld(use, where)
        if problem is not None:  # parses, but its strategy cannot hold it: the views
            unheld_by.setdefault(problem, []).append(use.view)
        if where is None:
            guess = _meant(use.scope, rates) if use.scope is not None else None
            if fallback and guess is not None and not _coded(use.throttle):  # W005
                found.append(checks.Warning(_defaulted(use, guess), id="freqguard.W005"))
            if fallback or _coded(use.throttle):  # the rate is found, or not seen here
                continue
            if use.scope is not None:
                key = (use.throttle, use.scope, use.view if use.attr else None)
                unnamed.setdefault(key, []).append(use)
            else:
                unrated.setdefault(use.throttle, []).append(use)
        elif where.scope is None:
            rated.setdefault(use.throttle, []).append(use)
        elif where.scope in bad:
            read.setdefault(where.scope, []).append(use.view)
    found += [
        checks.Error(_unnamed(views, rates), id="freqguard.E004") for views in unnamed.values()
    ]
    found += [checks.Error(_unrated(views), id="freqguard.E006") for views in unrated.values()]
    found += [checks.Error(f"{_who(v)}: {p}", id="freqguard.E003") for p, v in unheld_by.items()]
    for uses in rated.values():
        found += _bad_rate(uses, getattr(uses[0].throttle, "rate", None))
    for scope, text in bad.items():
        if scope in read:
            text += f"; {_who(read[scope])} {'reads' if len(read[scope]) == 1 else 'read'} it"
        if default or scope in read:
            found.append(checks.Error(text, id="freqguard.E003"))
        else:
            found.append(checks.Warning(text, id="freqguard.W002"))
    return found + budgets


def _of_the_walk(walked: Walk) -> list[checks.CheckMessage]:
    """What the walk itself found: ``E005``, ``I001``, ``W003`` and ``W004``."""
    found: list[checks.CheckMessage] = [
        checks.Error(_path(where, path), id="freqguard.E005") for where, path in walked.paths
    ]
    # quiet unless freqguard's DRF throttles are loaded (the walk has imported every view's
    # module): without them get_throttles() has none of freqguard's to choose
    if walked.unseen and _DRF in sys.modules:
        found.append(checks.Info(_unseen(list(walked.unseen.values())), id="freqguard.I001"))
    if _DRF in sys.modules:  # W008: a view's scope none of its throttles reads
        found += [checks.Warning(_unscoped(*u), id="freqguard.W008") for u in walked.unscoped]
    if walked.stopped is not None:
        found.append(checks.Warning(_stopped(walked.stopped), id="freqguard.W003"))
    if walked.deep:
        found.append(checks.Warning(_deep(walked.deep), id="freqguard.W004"))
    return found


def _unscoped(where: str, scope: str, throttles: tuple[Any, ...]) -> str:
    have = ", ".join(map(dotted, throttles)) or "none (DEFAULT_THROTTLE_CLASSES names none)"
    return (
        f"{where}: throttle_scope {shown(scope)} is read by none of its throttles ({have}), "
        "so its rate applies to nothing, as in DRF: add "
        "freqguard.integrations.drf.FreqGuardScopedThrottle to the view's throttle_classes "
        "(or to DEFAULT_THROTTLE_CLASSES), or drop throttle_scope"
    )


def _bad_rates(rates: object) -> dict[object, str]:
    """The scopes of DRF's ``DEFAULT_THROTTLE_RATES`` whose rate freqguard's throttles cannot
    read (DRF reads a unit by its first letter, so ``"3/minit"`` served there), each its
    error."""
    if not isinstance(rates, Mapping):
        return {}
    problems = {}
    for scope, rate in rates.items():
        try:
            if rate is not None:
                parse_rates(rate)
        except ConfigError as error:
            problems[scope] = (
                f"REST_FRAMEWORK's DEFAULT_THROTTLE_RATES[{shown(scope)}] = {shown(rate)}: "
                f"{error}. {_WHOLE}"
            )
    return problems


def _bad_rate(uses: list[Use], text: object) -> list[checks.CheckMessage]:
    """A throttle's own rate (a text: a property is read at the request), unless it parses:
    one error, naming the views using the throttle (the first few, and how many)."""
    if not isinstance(text, str):
        return []
    try:
        parse_rates(text)
    except ConfigError as error:
        who = _who([use.view for use in uses])
        where = f"{dotted(uses[0].throttle)}.rate = {shown(text)}"
        return [checks.Error(f"{who}: {where}: {error}. {_WHOLE}", id="freqguard.E003")]
    return []


def _meant(scope: object, rates: object) -> str | None:
    """The scope of ``rates`` that ``scope`` is likely a misspelling of, if any."""
    named = [str(name) for name in rates] if isinstance(rates, Mapping) else []
    return next(iter(difflib.get_close_matches(str(scope), named, 1)), None)


def _defaulted(use: Use, guess: str) -> str:
    """W005's message: a scope no rate names, one close to it named, the default taken."""
    return (
        f"{_who([use.view])}: {dotted(use.throttle)} reads the scope {shown(use.scope)}, which "
        f"REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'] does not name (did you mean {shown(guess)}?): "
        "it takes FREQGUARD_DEFAULT_LIMITS instead, quietly; name the scope, or silence "
        "freqguard.W005 if the default is meant"
    )


def _unnamed(uses: list[Use], rates: object) -> str:
    """E004's message: the views (the first few, and how many), the throttle, the scope
    unnamed, and the fixes."""
    use = uses[0]
    who = _who([each.view for each in uses])
    them = "them" if len(uses) > 1 else "the view"
    guess = _meant(use.scope, rates)
    hint = f" (did you mean {shown(guess)}?)" if guess else ""
    what = f"the view's {use.attr}" if use.attr else "the scope"
    return (
        f"{who}: {dotted(use.throttle)} reads {what} {shown(use.scope)}, which "
        f"REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'] does not name{hint}, and "
        f"FREQGUARD_DEFAULT_LIMITS is not set: every request to {them} would fail "
        f"(ConfigError, a 500). Name it there ({shown(use.scope)}: '100/hour', or None for no "
        "throttling), "
        + (
            "or fix the view's throttle_scope, or set FREQGUARD_DEFAULT_LIMITS"
            if use.attr
            else f"or give {use.throttle.__name__} a rate"
        )
    )


def _unrated(uses: list[Use]) -> str:
    """E006's message: the views (the first few, and how many), the throttle with neither a
    rate nor a scope, and the fixes."""
    name = uses[0].throttle.__name__
    them = "them" if len(uses) > 1 else "the view"
    return (
        f"{_who([use.view for use in uses])}: {dotted(uses[0].throttle)} has neither a rate "
        "nor a scope (both None), and FREQGUARD_DEFAULT_LIMITS is not set: every request "
        f"to {them} would fail (ConfigError: {name} has no rate, a 500). Give the throttle "
        f"a rate (a subclass of {name} with rate = '100/hour'), or a scope with a rate in "
        "REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'] (scope = 'api', and 'api': '100/hour' "
        "there), or set FREQGUARD_DEFAULT_LIMITS (each view its own budget)"
    )


def _unseen(views: list[str]) -> str:
    """I001's message: the views whose throttles get_throttles() chooses, and the fix."""
    them = "these views'" if len(views) > 1 else "the view's"
    return (
        f"{_who(views)}: get_throttles() chooses the throttles at each request, and the check "
        f"cannot call it without a request, so it does not judge {them} throttle_classes: a "
        "scope with no rate or a rate that does not parse, read by what it chooses, is found "
        "at the first request instead. To have a view checked, name its throttles in "
        "throttle_classes (an action's in @action(throttle_classes=[...]), a URL's in "
        "as_view(throttle_classes=[...])) rather than in get_throttles(); if the override "
        "is meant, SILENCED_SYSTEM_CHECKS = ['freqguard.I001'] silences this"
    )


def _stopped(where: str) -> str:
    """W003's message: where the walk stopped, what it did not check, and what to do."""
    return (
        f"The check of the views' DRF throttles stopped its walk of the URLconf after "
        f"{MOST_PATTERNS} URL patterns (a bound on its time), at {where}: the views from "
        "there on were not checked, so a scope with no rate, a rate that does not parse or "
        "a dotted path in throttle_classes there is found at the first request instead. If "
        "the URLconf is that large on purpose, SILENCED_SYSTEM_CHECKS = ['freqguard.W003'] "
        "silences this"
    )


def _deep(includes: list[str]) -> str:
    """W004's message: how many includes the walk did not descend into, the first, and what
    to do."""
    many = f"{len(includes)} includes" if len(includes) > 1 else "1 include"
    return (
        f"The check of the views' DRF throttles did not descend into {many} nested deeper "
        f"than {DEEPEST}, the first at {includes[0]} (a bound against includes nesting "
        "without end): the views in them were not checked, so a scope with no rate, a rate "
        "that does not parse or a dotted path in throttle_classes there is found at the "
        "first request instead. Include those URLconfs nearer the root; if the nesting is "
        "meant, SILENCED_SYSTEM_CHECKS = ['freqguard.W004'] silences this"
    )


def _who(views: list[str]) -> str:
    """The views a message names: the one, or how many and the first few."""
    if len(views) == 1:
        return views[0]
    more = f" and {len(views) - _SHOWN} more" if len(views) > _SHOWN else ""
    return f"{len(views)} views, " + ", ".join(views[:_SHOWN]) + more


def _drf_rates() -> object:
    """``DEFAULT_THROTTLE_RATES`` as the throttles read it (DRF's default when unset)."""
    from rest_framework.settings import api_settings  # installed: a view names a throttle

    return api_settings.DEFAULT_THROTTLE_RATES


def _path(view: str, path: str) -> str:
    """E005's message: the view, the dotted path in its throttle_classes, and the fix."""
    module, _, name = path.rpartition(".")
    fix = f" (from {module} import {name}; throttle_classes = [{name}])" if module else ""
    return (
        f"{view}: throttle_classes names {path!r}, a dotted path: DRF calls each of a view's "
        "throttle_classes as it is, so every request to the view would fail (TypeError: "
        f"'str' object is not callable, a 500). Put the class itself there{fix}: DRF "
        "imports dotted paths only in REST_FRAMEWORK['DEFAULT_THROTTLE_CLASSES']"
    )
