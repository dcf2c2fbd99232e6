"""The Django integration's state: the guards made from the settings, the routes built per
view, and what one request has decided so far.

One state per process, made from ``django.conf.settings`` at first use and dropped when a
``FREQGUARD_*`` setting changes (``override_settings`` in tests). The sync :class:`Guard`
serves WSGI and sync views; the :class:`AsyncGuard` serves the async middleware and async
views: on the memory backend (or a Guard given in the settings) it is the sync guard's async
face, one store for both; on Redis a native async client, on the same server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.urls import URLPattern, URLResolver

from freqguard.backends.urls import async_backend_from_url, backend_from_url
from freqguard.decision import Decision
from freqguard.decorators.adapters import as_async
from freqguard.guard import AsyncGuard, Guard
from freqguard.integrations._client_ip import client_ip
from freqguard.integrations._decide import Answer, Decider, KeyedRules, Route
from freqguard.integrations._django_settings import Settings, read_settings
from freqguard.integrations._request import KeyFunc, RequestInfo
from freqguard.rates import Rate
from freqguard.rules import Rule, fit_name

__all__ = [
    "RequestNotes",
    "State",
    "ViewCap",
    "current",
    "drop",
    "load_user",
    "needs_user",
    "noted",
    "notes_of",
    "request_info",
    "response",
    "unclosed",
    "with_headers",
]

_peer = client_ip()


@dataclass(eq=False)  # hashed by identity: a request's decided caps are a set of them
class ViewCap:
    """What ``@capped`` asked for one view (or class-based view)."""

    items: tuple[Rate | Rule, ...]
    key: KeyFunc | None  # None: FREQGUARD_KEY, else the peer address
    cost: int
    name: str | None  # the policy's name when decided with the route's
    alone: str  # its policy when decided on its own
    on_error: object = None


@dataclass
class RequestNotes:
    """What one request has decided: the caps, the decisions (for the headers)."""

    decided: set[ViewCap] = field(default_factory=set)
    decisions: list[Decision] = field(default_factory=list)
    middleware: bool = False  # the middleware adds the headers to the response
    first: Answer | None = None  # the first decision's answer: its headers are planned

    def note(self, answer: Answer) -> None:
        """Note an answer's decision (none: refused before a hit, or skipped)."""
        if answer.decision is not None:
            if not self.decisions and answer.allowed:  # a refusal's are a problem's too
                self.first = answer
            self.decisions.append(answer.decision)


def notes_of(request: Any) -> RequestNotes:
    """The request's notes (a DRF Request's are its Django request's)."""
    request = getattr(request, "_request", request)
    found: RequestNotes | None = getattr(request, "freqguard", None)
    if found is None:
        found = request.freqguard = RequestNotes()
    return found


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
        self.throttles: dict[tuple[type[Any], type[Any]], Route] = {}  # DRF's, by class
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
            self._decider = Decider(self.guard(), (), self.settings.headers)
        return self._decider

    def adecider(self) -> Decider:
        if self._adecider is None:
            self._adecider = Decider(self.aguard(), (), self.settings.headers)
        return self._adecider

    def view_route(
        self, view_name: str, view: Callable[..., Any], resolver: Any
    ) -> tuple[Route, ViewCap | None] | None:
        """The route of a resolved view, and its cap: the default limits and the view's
        cap, one policy decided in one hit (None: nothing caps it). Route names are not
        unique in Django: a name ``resolver`` gives several views is told apart by the
        view's dotted path (one view under several paths of one name is one route)."""
        owner = getattr(view, "view_class", None)  # a class-based view's as_view()
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
        exempt = getattr(view, "_freqguard_exempt", False) or getattr(
            owner, "_freqguard_exempt", False
        )
        defaults = () if exempt else self.settings.defaults
        parts = [KeyedRules(self.key, defaults, "default")] if defaults else []
        if cap is not None:
            parts.append(KeyedRules(cap.key or self.key, cap.items))
        found = None
        if parts:
            name = (cap.name if cap is not None else None) or _fit(view_name)
            cost = cap.cost if cap is not None else 1
            on_error = cap.on_error if cap is not None else None
            found = Route(name, tuple(parts), cost, on_error=on_error), cap
        self.routes[where] = found
        return found

    def alone_route(self, cap: ViewCap) -> Route:
        """The route of a cap decided on its own (no middleware, or not seen by it)."""
        route = self.alone.get(cap)
        if route is None:
            part = KeyedRules(cap.key or self.key, cap.items)
            route = self.alone[cap] = Route(cap.alone, (part,), cap.cost, on_error=cap.on_error)
        return route

    def headers(self, notes: RequestNotes) -> dict[str, str]:
        """The rate-limit headers of the tightest of a request's decisions."""
        decisions = notes.decisions
        if len(decisions) == 1 and notes.first is not None:
            return notes.first.headers  # the usual case: built from the route's plan
        tightest = min(decisions, key=lambda d: (d.allowed, d.remaining))
        return tightest.headers(self.settings.headers)


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


def request_info(request: HttpRequest) -> RequestInfo:
    """A Django request as key functions read it (WSGI and ASGI alike: ``request.META``)."""
    meta = request.META

    def read_headers() -> dict[str, list[str]]:
        # the server (or Django's ASGI handler) has joined repeated lines into one value
        return {
            name[5:].replace("_", "-").lower(): [value]
            for name, value in meta.items()
            if name.startswith("HTTP_")
        }

    return RequestInfo(
        request.method or "GET",
        request.path_info,
        read_headers,
        meta.get("REMOTE_ADDR"),
        None,
        request,
    )


def response(answer: Answer) -> HttpResponse:
    """A refusal (400, 429, 503) as a Django response: the problem body and its headers."""
    found = HttpResponse(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        found[name] = value
    return found


def noted(notes: RequestNotes, cap: ViewCap | None, answer: Answer) -> HttpResponseBase | None:
    """Note an answer on the request; the refusal to send, if refused."""
    if cap is not None:
        notes.decided.add(cap)
    notes.note(answer)  # a denial too: the tightest, whose headers the response keeps
    return None if answer.allowed else response(answer)


def with_headers(state: State, notes: RequestNotes, found: HttpResponseBase) -> HttpResponseBase:
    if notes.decisions:
        for name, value in state.headers(notes).items():
            found[name] = value
    return found


def needs_user(route: Route) -> bool:
    return any(getattr(part.key, "needs_user", False) for part in route.keyed)


def load_user(request: Any) -> None:
    """Evaluate the lazy ``request.user`` (a session lookup): off the event loop."""
    user = getattr(request, "user", None)
    if user is not None:
        user.is_authenticated  # noqa: B018 -- evaluated for its side effect, the lookup
