"""The Django integration's state: the guards made from the settings and the routes built
per view (what one request has decided is in ``_django_requests``).

One state per process, made from ``django.conf.settings`` at first use and dropped when a
``FREQGUARD_*`` setting changes (``override_settings`` in tests). The sync :class:`Guard`
serves WSGI and sync views; the :class:`AsyncGuard` serves the async middleware and async
views: on the memory backend (or a Guard given in the settings) it is the sync guard's async
face, one store for both; on Redis a native async client, on the same server.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.signals import setting_changed
from django.urls import URLPattern, URLResolver

from freqguard.backends.urls import async_backend_from_url, backend_from_url
from freqguard.decorators.adapters import as_async
from freqguard.errors import ConfigError
from freqguard.guard import AsyncGuard, Guard
from freqguard.integrations._client_ip import client_ip
from freqguard.integrations._decide import Decider, KeyedRules, Route
from freqguard.integrations._decide import preflight as is_preflight
from freqguard.integrations._django_policies import register
from freqguard.integrations._django_settings import Settings, read_settings
from freqguard.integrations._request import KeyFunc
from freqguard.policy import Policy
from freqguard.rates import Rate
from freqguard.rules import Rule, fit_name

__all__ = [
    "NAMED",
    "State",
    "ViewCap",
    "current",
    "drop",
    "preflight",
    "shared_names",
    "unclosed",
]

_peer = client_ip()

#: The caps given a ``name=`` (its budget), by name: what :func:`peek` and :func:`hit` of
#: ``freqguard.integrations.django`` decide a request on.
NAMED: dict[str, ViewCap] = {}


@dataclass(eq=False)  # hashed by identity: a request's decided caps are a set of them
class ViewCap:
    """What ``@capped`` asked for one view (or class-based view)."""

    items: tuple[Rate | Rule, ...]
    key: KeyFunc | None  # None: FREQGUARD_KEY, else the peer address
    cost: int
    name: str | None  # a budget shared by every cap of that name: its policy's name
    alone: str  # its policy when decided on its own, unnamed
    on_error: object = None
    block: bool = True  # False: decided, noted on the request, never refused
    methods: frozenset[str] | None = None  # None: every method

    @property
    def merges(self) -> bool:
        """Decided with the view's default limits, in the middleware's one hit: a cap of
        its own view (unnamed) that refuses (``block``) every method."""
        return self.name is None and self.block and self.methods is None

    def applies(self, request: Any) -> bool:
        """Whether the cap counts ``request``: its method is capped; a CORS preflight (an
        ``OPTIONS`` asking leave for another method, the browser's question, not a call)
        only by a cap whose methods name ``OPTIONS``."""
        if preflight(request):
            return self.methods is not None and "OPTIONS" in self.methods
        return self.methods is None or (request.method or "GET") in self.methods


def preflight(request: Any) -> bool:
    """Whether ``request`` (Django's, or DRF's around it) is a CORS preflight."""
    return is_preflight(request.method, request.META)


class State:
    """The guards and routes made from one version of the settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.key: KeyFunc = settings.key or _peer
        # by view name and view: route names are not unique
        self.routes: dict[tuple[str, object], tuple[Route, ViewCap | None] | None] = {}
        self.shared: dict[object, frozenset[str]] = {}  # by resolver: names of several views
        self.alone: dict[ViewCap, Route] = {}
        # by (resolver, path): the route the path resolves to
        self.resolved: dict[tuple[object, str], tuple[Route, ViewCap | None] | None] = {}
        # DRF's, by class and name, with what each was made at (its rates, or for a rate
        # per request how many); and what each name's policy was last registered by
        self.throttles: dict[tuple[type[Any], str], tuple[Route, object]] = {}
        self.throttled: dict[str, object] = {}
        self.sources: dict[Route, str] = {}  # who gave each route's rules (see register)
        self._replaced: dict[Route, str] = {}  # the latest forgotten's, for one on its way
        self._lock = threading.Lock()
        self._guard: Guard | None = None
        self._aguard: AsyncGuard | None = None
        self._decider: Decider | None = None
        self._adecider: Decider | None = None
        self.made: list[Guard | AsyncGuard] = []  # the guards made here, closed here

    def guard(self) -> Guard:
        if self._guard is None:
            with self._lock:
                if self._guard is None:
                    self._guard = self._make_guard()
        return self._guard

    def _make_guard(self) -> Guard:
        settings = self.settings
        if isinstance(settings.backend, Guard):
            return settings.backend
        made = (
            settings.config.guard()
            if settings.config is not None
            else Guard(backend_from_url(settings.backend))
        )
        self.made.append(made)
        return made

    def aguard(self) -> AsyncGuard:
        if self._aguard is None:
            with self._lock:
                if self._aguard is None:
                    self._aguard = self._make_aguard()
        return self._aguard

    def _make_aguard(self) -> AsyncGuard:
        settings = self.settings
        url = settings.config.backend if settings.config is not None else settings.backend
        if isinstance(url, Guard) or url.startswith("memory:"):
            guard = url if isinstance(url, Guard) else self._guard or self._make_guard()
            self._guard = guard
            assert isinstance(guard, Guard)
            # one store for both sides: a sync view and an async one count together
            return as_async(guard)
        made = (
            settings.config.async_guard()
            if settings.config is not None
            else AsyncGuard(async_backend_from_url(url))
        )
        self.made.append(made)
        return made

    def decider(self) -> Decider:
        if self._decider is None:
            self._decider = self._make_decider(self.guard())
        return self._decider

    def adecider(self) -> Decider:
        if self._adecider is None:
            self._adecider = self._make_decider(self.aguard())
        return self._adecider

    def _make_decider(self, guard: Guard | AsyncGuard) -> Decider:
        def add(route: Route, policy: Policy) -> None:
            source = self.sources.get(route) or self._replaced.get(route)
            register(guard, policy, source or f"route {route.name!r}")

        return Decider(guard, (), self.settings.headers, add)

    def remember(self, route: Route, source: str) -> Route:
        """``route``, whose rules ``source`` gives (named if two give one policy two)."""
        self.sources[route] = source
        return route

    def forget(self, route: Route) -> None:
        """Drop a route another replaced (a DRF throttle's rates changed since): what the
        process holds is bounded by the routes in use, not by the requests."""
        source = self.sources.pop(route, None)
        if source is not None:  # a request on its way with it may register it (no other has)
            self._replaced[route] = source
            if len(self._replaced) > 64:
                del self._replaced[next(iter(self._replaced))]
        for decider in (self._decider, self._adecider):
            if decider is not None:
                decider.forget(route)

    def view_route(
        self, view_name: str, view: Callable[..., Any], resolver: Any
    ) -> tuple[Route, ViewCap | None] | None:
        """The route of a resolved view, and its cap: the default limits and the view's
        cap, one policy decided in one hit (None: nothing caps it). Route names are not
        unique in Django: a name ``resolver`` gives several views is told apart by the
        view's dotted path (one view under several paths of one name is one route)."""
        # a class-based view's as_view(); a DRF router's ViewSet says .cls only
        owner = getattr(view, "view_class", None) or getattr(view, "cls", None)
        where = (view_name, owner or view)
        try:
            return self.routes[where]
        except KeyError:
            pass
        shared = self.shared.get(resolver)
        if shared is None:
            shared = self.shared[resolver] = shared_names(resolver)
        if view_name in shared:
            target = owner or view
            view_name += f".{target.__module__}.{target.__qualname__}"
        cap: ViewCap | None = getattr(view, "_freqguard_cap", None) or getattr(
            owner, "_freqguard_cap", None
        )
        if cap is not None and not cap.merges:  # decided on its own, when the view runs
            cap = None
        defaults = () if _exempt(view, owner) else self.settings.defaults
        keyed = [KeyedRules(self.key, defaults, "default")] if defaults else []
        if cap is not None:
            keyed.append(KeyedRules(cap.key or self.key, cap.items))
        found = None
        if keyed:
            cost = cap.cost if cap is not None else 1
            on_error = cap.on_error if cap is not None else None
            route = Route(_fit(view_name), tuple(keyed), cost, on_error=on_error)
            found = self.remember(route, f"the view {_dotted(owner or view)}"), cap
        self.routes[where] = found
        return found

    def named_route(self, name: str) -> Route:
        """The route of the caps named ``name``.

        Raises:
            ConfigError: no cap has that name (listing those that do).
        """
        cap = NAMED.get(name)
        if cap is None:
            known = ", ".join(sorted(NAMED)) or "none"
            raise ConfigError(f"no @capped(..., name={name!r}) (the caps named: {known})")
        return self.alone_route(cap)

    def alone_route(self, cap: ViewCap) -> Route:
        """The route of a cap decided on its own (no middleware, a method's cap, or one the
        middleware leaves to its view: named, not blocking, or for some methods)."""
        route = self.alone.get(cap)
        if route is None:
            part = KeyedRules(cap.key or self.key, cap.items)
            made = Route(cap.name or cap.alone, (part,), cap.cost, on_error=cap.on_error)
            route = self.alone[cap] = self.remember(made, f"@capped on {cap.alone[12:]}")
        return route


def _exempt(view: Any, owner: Any) -> bool:
    """Whether ``@exempt`` marks the view, its class, or every handler the class has (its
    own or inherited): DRF's ``@api_view`` makes a class whose handlers call the function
    under it, which holds the mark."""
    if getattr(view, "_freqguard_exempt", False) or getattr(owner, "_freqguard_exempt", False):
        return True
    names = [m for m in getattr(owner, "http_method_names", ()) if m not in ("options", "head")]
    handlers = [found for m in names if (found := getattr(owner, m, None)) is not None]
    return bool(handlers) and all(_marked(handler) for handler in handlers)


def _marked(handler: Any) -> bool:
    """A handler ``@exempt`` marks, or one that calls a function it marks (``@api_view``'s,
    which holds that function in its closure)."""
    if getattr(handler, "_freqguard_exempt", False):
        return True
    for cell in getattr(handler, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            if getattr(cell.cell_contents, "_freqguard_exempt", False):
                return True
    return False


def _dotted(target: Any) -> str:
    return f"{target.__module__}.{target.__qualname__}"


def _fit(view_name: str) -> str:
    return fit_name("django." + view_name.replace(":", "."))


def shared_names(resolver: Any) -> frozenset[str]:
    """The route names (``namespace:name``) that ``resolver`` gives to more than one view."""
    views: dict[str, set[object]] = {}

    def walk(patterns: Any, namespaces: tuple[str, ...]) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = (*namespaces, pattern.namespace) if pattern.namespace else namespaces
                walk(pattern.url_patterns, inner)
            elif isinstance(pattern, URLPattern) and pattern.name:
                view = pattern.callback
                found = views.setdefault(":".join((*namespaces, pattern.name)), set())
                found.add(getattr(view, "view_class", None) or view)

    walk(resolver.url_patterns, ())
    return frozenset(name for name, found in views.items() if len(found) > 1)


_state: State | None = None
_state_lock = threading.Lock()


def current() -> State:
    """The state made from the settings now in force.

    Raises:
        ConfigError: an unknown ``FREQGUARD_*`` setting or a bad value.
    """
    state = _state
    if state is None:
        with _state_lock:
            state = _state
            if state is None:
                state = State(read_settings())
                _set(state)
    return state


def _set(state: State | None) -> None:
    global _state
    _state = state


#: async guards of dropped states: closed by the next ``aclose()`` (a settings signal is sync)
unclosed: list[AsyncGuard] = []


def drop() -> list[AsyncGuard]:
    """Forget the state (the next use makes it anew), closing the sync guards it made; the
    async ones, to close (awaited, on their event loop)."""
    with _state_lock:
        old = _state
        _set(None)
    made = [] if old is None else old.made
    for guard in made:
        if isinstance(guard, Guard):
            guard.close()
    return [guard for guard in made if isinstance(guard, AsyncGuard)]


def _changed(*, setting: str, **kwargs: object) -> None:
    if setting.startswith("FREQGUARD_"):
        unclosed.extend(drop())


setting_changed.connect(_changed, dispatch_uid="freqguard.settings")
