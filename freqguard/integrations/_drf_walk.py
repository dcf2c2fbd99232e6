"""The walk of the URLconf for the checks of DRF throttles
(:mod:`freqguard.integrations._drf_throttles`): each view the URLconf reaches (``APIView``s,
``@api_view`` functions, a router's ViewSets and their actions, with what ``as_view(...)``
gives them) and the freqguard throttles it names, within bounds; and what else the checks
say of the views (a dotted path in ``throttle_classes``, a ``get_throttles()`` of their own,
a cap naming a budget, of any view).

A throttle is freqguard's by the names in its MRO: drf.py imports the checks, and they run
where DRF is not installed. A URLconf (or an include) that does not load is left to
Django's own check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.module_loading import import_string

__all__ = ["DEEPEST", "MOST_PATTERNS", "Use", "Walk", "dotted", "ours", "walk"]

_THROTTLE = "freqguard.integrations.drf.FreqGuardThrottle"
_SCOPED = "freqguard.integrations.drf.FreqGuardScopedThrottle"
_APIVIEW = "rest_framework.views.APIView"
_SCOPE = "throttle_scope"  # the view's attribute DRF's and freqguard's scoped throttles read
#: The modules of throttles that read no view's scope unless scoped (and of object's own)
_OURS_OR_THEIRS = (
    "freqguard.integrations.drf",
    "rest_framework.throttling",
    "builtins",
)  # its get_throttles() makes throttle_classes
#: The bounds of the walk: URL patterns visited, and includes followed one inside another.
MOST_PATTERNS = 20_000
DEEPEST = 32


@dataclass(frozen=True)
class Use:
    """A view of the URLconf and a freqguard throttle it names."""

    view: str  # dotted, and where: "app.views.Orders (URL 'api/orders')"
    throttle: type
    scope: object  # the scope it reads (the view's, for a scoped throttle)
    attr: str | None  # the view's attribute naming it, for a scoped throttle


@dataclass
class Walk:
    """What the walk of the URLconf found."""

    uses: list[Use] = field(default_factory=list)
    #: E005: a view (and where) and a dotted path in its throttle_classes
    paths: list[tuple[str, str]] = field(default_factory=list)
    unseen: dict[type, str] = field(default_factory=dict)  # I001: views choosing in code
    stopped: str | None = None  # W003: the first pattern past the bound, if any
    deep: list[str] = field(default_factory=list)  # W004: the includes nested past the bound
    #: E007: each view capped with ``name=`` (and where), and its cap
    named: list[tuple[str, Any]] = field(default_factory=list)
    #: E008: each view whose cap costs more than 1 and is decided with the default limits
    costly: list[tuple[str, Any]] = field(default_factory=list)
    #: W007: each view whose cap, decided by the middleware, keys by the user
    users: list[tuple[str, Any]] = field(default_factory=list)
    #: W008: each view (and where) whose throttle_scope none of its throttles reads, the
    #: scope, and its throttles
    unscoped: list[tuple[str, str, tuple[Any, ...]]] = field(default_factory=list)


def walk() -> Walk:
    """Each view of the URLconf and each freqguard throttle it names, once, at the first
    URL that reaches it; and what else the check says of the views."""
    found = Walk()
    seen: set[tuple[type, type, object]] = set()
    said: set[tuple[type, str]] = set()  # a view's dotted paths told of
    for url, callback in _patterns(found):
        _note_named(found, url, callback)
        view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        if not isinstance(view, type):
            continue
        init = getattr(callback, "initkwargs", None) or getattr(callback, "view_initkwargs", {})
        init = init if isinstance(init, Mapping) else {}  # as_view(**initkwargs), router actions
        name = f"{view.__module__}.{view.__name__}"
        where = f"{name} (URL {url!r})"
        chooser = _chooser(view)
        if chooser is None:  # no view of DRF's: its throttle_classes are no one's
            continue
        if dotted(chooser) != _APIVIEW:  # throttle_classes may not be what runs: not judged
            of = "" if chooser is view else f", get_throttles() of {dotted(chooser)}"
            found.unseen.setdefault(view, f"{name} (URL {url!r}{of})")
            continue
        throttles = init.get("throttle_classes", getattr(view, "throttle_classes", ()))
        _note_unscoped(found, where, init.get(_SCOPE, getattr(view, _SCOPE, None)), throttles)
        for throttle in throttles if isinstance(throttles, (list, tuple)) else ():
            if isinstance(throttle, str):  # not imported by DRF here: not what runs
                if (view, throttle) not in said:
                    said.add((view, throttle))
                    found.paths.append((where, throttle))
                continue
            freqguards = ours(throttle)
            use = _use(where, view, init, freqguards) if freqguards is not None else None
            if use is not None and (view, use.throttle, use.scope) not in seen:
                seen.add((view, use.throttle, use.scope))
                found.uses.append(use)
    return found


def _note_named(found: Walk, url: str, callback: Any) -> None:
    """Note the view's caps that name a budget (``@capped(name=...)`` on a function view,
    on a class-based view's class, or around its ``as_view()``), each once; and the one
    the middleware decides with the default limits (the view's own first) if it costs
    more than 1."""
    capped = getattr(callback, "view_class", None) or callback
    name = getattr(capped, "__qualname__", None) or repr(capped)
    where = f"{getattr(capped, '__module__', '?')}.{name} (URL {url!r})"
    own, classes = (
        getattr(callback, "_freqguard_cap", None),
        getattr(capped, "_freqguard_cap", None),
    )
    for cap in (own, classes):
        if getattr(cap, "name", None) is not None and all(c is not cap for _, c in found.named):
            found.named.append((where, cap))
    cap = own or classes
    exempt = getattr(callback, "_freqguard_exempt", False) or getattr(
        capped, "_freqguard_exempt", False
    )
    if cap is not None and getattr(cap, "merges", False) and cap.cost > 1 and not exempt:
        found.costly.append((where, cap))
    if cap is not None and getattr(cap, "merges", False) and getattr(cap.key, "needs_user", 0):
        found.users.append((where, cap))


def _note_unscoped(found: Walk, where: str, scope: object, throttles: object) -> None:
    """Note a view whose ``throttle_scope`` none of its throttles reads: a throttle with a
    ``scope_attr`` (DRF's and freqguard's scoped ones) reads it, and so may one deciding in
    code of its own (not DRF's nor freqguard's); DRF's or freqguard's others do not."""
    if not isinstance(scope, str) or not scope or not isinstance(throttles, (list, tuple)):
        return
    for throttle in throttles:
        if not isinstance(throttle, type) or hasattr(throttle, "scope_attr"):
            return  # a dotted path (E005's), or a scoped throttle
        for name in ("__init__", "allow_request", "get_cache_key", "get_rate"):
            owner = next((base for base in throttle.__mro__ if name in vars(base)), object)
            if owner.__module__ not in _OURS_OR_THEIRS:  # its own code: not judged
                return
    found.unscoped.append((where, scope, tuple(throttles)))


def _use(where: str, view: type, init: Mapping[str, Any], throttle: type) -> Use | None:
    """The scope a view's freqguard throttle reads (None: the view is not throttled, or
    the scope is not text, as DRF's are, and not judged)."""
    attr, scope = None, getattr(throttle, "scope", None)
    if _is(throttle, _SCOPED):  # the view names the scope
        attr = getattr(throttle, "scope_attr", "throttle_scope")
        scope = init.get(attr, getattr(view, attr, None))
        if not scope:  # a view without one is not throttled
            return None
    if scope is not None and not isinstance(scope, str):
        return None
    return Use(where, throttle, scope, attr)


def _chooser(view: type) -> type | None:
    """The class whose ``get_throttles()`` the view runs (DRF's APIView's answers
    ``throttle_classes``); None: DRF does not throttle the view (a plain Django view's
    ``throttle_classes`` run nowhere)."""
    return next((base for base in view.__mro__ if "get_throttles" in vars(base)), None)


def _patterns(walk: Walk) -> Iterator[tuple[str, Any]]:
    """Each URL pattern of the project's URLconf, its route and its view, depth first, within
    the bounds (the first pattern past the most: ``walk.stopped``; the includes nested past
    the deepest, not descended into: ``walk.deep``); none from a URLconf (or an include)
    that does not load."""
    stack: list[tuple[str, int, Iterator[Any]]] = []
    try:
        stack.append(("", 0, iter(get_resolver().url_patterns)))
    except Exception:  # any error importing the project's code: Django's check reports it
        return
    visited = 0
    while stack:
        prefix, depth, patterns = stack[-1]
        pattern = next(patterns, None)
        if pattern is None:
            stack.pop()
            continue
        route = prefix + _route(pattern)
        if visited == MOST_PATTERNS:  # one pattern more than the bound: not all walked
            view = f" ({pattern.lookup_str})" if isinstance(pattern, URLPattern) else ""
            walk.stopped = f"URL {route!r}{view}"
            return
        visited += 1
        if isinstance(pattern, URLResolver) and depth >= DEEPEST:
            walk.deep.append(f"URL {route!r}{_included(pattern)}")
        elif isinstance(pattern, URLResolver):
            try:
                stack.append((route, depth + 1, iter(pattern.url_patterns)))
            except Exception:  # as above: an include that does not load is Django's to report
                continue
        elif isinstance(pattern, URLPattern):
            yield route, pattern.callback


def _included(resolver: URLResolver) -> str:
    """What an include includes, when it has a name: a URLconf module's (a list has none)."""
    conf = resolver.urlconf_name
    name = conf if isinstance(conf, str) else getattr(conf, "__name__", None)
    return f" (an include of {name!r})" if isinstance(name, str) else ""


def _route(pattern: Any) -> str:
    """A pattern's part of the URL, as written (a regex's without its anchors)."""
    text = str(getattr(pattern, "pattern", ""))
    return text.removeprefix("^").removesuffix("$") if text.startswith("^") else text


def ours(throttle: object) -> type | None:
    """A DRF throttle class (or its dotted path), if freqguard's or made from one."""
    try:
        found = import_string(throttle) if isinstance(throttle, str) else throttle
    except ImportError:  # a path that does not import: DRF's own check says so
        return None
    return found if isinstance(found, type) and _is(found, _THROTTLE) else None


def _is(throttle: type, name: str) -> bool:
    return any(dotted(base) == name for base in throttle.__mro__)


def dotted(target: type) -> str:
    """A class's dotted path."""
    return f"{target.__module__}.{target.__qualname__}"
