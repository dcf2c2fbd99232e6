"""Django: ``FreqGuardMiddleware`` (default limits for every view), ``@capped`` views.

Settings (``settings.py``):

* ``FREQGUARD_BACKEND``: a backend URL (default ``"memory://"``), or a :class:`Guard`.
* ``FREQGUARD_CONFIG``: a configuration file's path (or a loaded
  :class:`~freqguard.config.Config`) to make the guard from; not with ``FREQGUARD_BACKEND``.
* ``FREQGUARD_DEFAULT_LIMITS``: rates applied to every view not exempt, each view counted
  on its own, its policy named ``django.<route name>`` (default none).
* ``FREQGUARD_HEADERS``: the header profile (default ``"ietf"``).
* ``FREQGUARD_ENABLED``: ``False`` switches every cap off (default ``True``).
* ``FREQGUARD_KEY``: the key function of the default limits and of caps given none
  (default: the peer address; behind proxies ``client_ip(trusted_proxies)``).

Any other ``FREQGUARD_*`` setting is an error naming the one it resembles, shown by
``manage.py check`` (with ``"freqguard.integrations.django.FreqGuardConfig"`` in
``INSTALLED_APPS``) and raised by the middleware when Django loads it.

A view's default limits and its own cap are one policy, decided in one atomic hit by the
middleware before the view runs: a request denied by either consumes from neither. A cap
the middleware cannot see (a method of a class-based view decorated with
``method_decorator``, or no middleware) is decided by the view's wrapper, on its own policy.

The middleware is sync and async: under ASGI (an async chain) it decides with an
:class:`AsyncGuard` and never blocks the event loop; under WSGI with a :class:`Guard`.
Denials answer 429 with an RFC 9457 problem body, ``Retry-After`` and the rate-limit headers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from freqguard.errors import install

try:  # named here: Django's own dependency (asgiref) would be the module said missing
    import django  # noqa: F401
except ModuleNotFoundError as missing:
    if missing.name != "django":
        raise
    raise ImportError(
        f"freqguard.integrations.django needs Django, an optional extra: {install('django')}"
    ) from missing

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.apps import AppConfig
from django.core import checks
from django.http import HttpRequest, HttpResponseBase
from django.urls import Resolver404, get_resolver

from freqguard.decision import Decision
from freqguard.engine.requests import Unfit
from freqguard.guard import AsyncGuard, Guard
from freqguard.integrations._decide import Route
from freqguard.integrations._django_caps import capped, exempt
from freqguard.integrations._django_leases import aanswered, answered
from freqguard.integrations._django_requests import (
    RequestNotes,
    load_user,
    needs_user,
    noted,
    request_info,
    taken,
    with_headers,
)
from freqguard.integrations._django_settings import check_settings
from freqguard.integrations._django_state import (
    State,
    ViewCap,
    current,
    drop,
    preflight,
    unclosed,
)
from freqguard.integrations._held import leasing, leasing_async
from freqguard.integrations._http import (
    BadRequest,
    KeyFunc,
    RequestInfo,
    SkipRequest,
    client_ip,
    header,
)
from freqguard.integrations._request import KEY_MAKERS
from freqguard.rules import Rule

__all__ = [
    "BadRequest",
    "FreqGuardConfig",
    "FreqGuardMiddleware",
    "SkipRequest",
    "aclose",
    "async_guard",
    "capped",
    "client_ip",
    "close",
    "exempt",
    "guard",
    "header",
    "hit",
    "peek",
    "user_or_ip",
]

_RESOLVED = 4096  # paths whose routes are remembered
Response = HttpResponseBase
GetResponse = Callable[[HttpRequest], Any]


class FreqGuardMiddleware:
    """Decides each request to a view before the view runs: its default limits and its
    ``@capped`` cap, in one hit.

    Place it after the middleware that sets ``request.user`` (for :func:`user_or_ip`) or
    ``request.urlconf``.

    Raises:
        ConfigError: when Django loads it, for an unknown ``FREQGUARD_*`` setting or a bad
            value.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)
        current()  # refuse to start on bad settings

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        state = current()
        found = _route_of(state, request)
        notes = request.freqguard = RequestNotes(middleware=True)  # type: ignore[attr-defined]
        if found is None:  # a DRF throttle or a method's cap may still decide
            return with_headers(state, notes, self.get_response(request))
        route, cap = found
        held: list[Decision] = []  # a lease, for a policy with a concurrency rule
        guard = state.guard()

        def respond() -> Any:  # decided inside answered's try: a lease taken goes back
            answer = state.decider().decide(leasing(guard, held), route, request_info(request))
            denied = noted(request, cap, answer)
            if denied is not None:
                return denied
            taken(request, guard, answer)
            return with_headers(state, notes, self.get_response(request))

        return answered(guard, held, respond, request)

    async def _acall(self, request: HttpRequest) -> Response:
        state = current()
        found = _route_of(state, request)
        notes = request.freqguard = RequestNotes(middleware=True)  # type: ignore[attr-defined]
        if found is None:  # a DRF throttle or a method's cap may still decide
            return with_headers(state, notes, await self.get_response(request))
        route, cap = found
        if needs_user(route):
            await sync_to_async(load_user)(request)
        guard, held = state.aguard(), list[Decision]()
        hit = leasing_async(guard, held)
        answer = await state.adecider().adecide(hit, route, request_info(request))
        denied = noted(request, cap, answer)
        if denied is not None:
            return denied
        taken(request, guard, answer)

        async def respond() -> Response:
            return with_headers(state, notes, await self.get_response(request))

        return await aanswered(guard, held, respond, request)


def _route_of(state: State, request: HttpRequest) -> tuple[Route, ViewCap | None] | None:
    """The route of the view the request resolves to (None: no view, or nothing caps it).

    Resolved here, as Django resolves it after the middleware chain (a cached resolver),
    and remembered by path: the view must be known before it runs, without a
    ``process_view`` hook whose mode would follow the handler's (a thread hop per request
    under ASGI). A CORS preflight (an ``OPTIONS`` asking leave for another method) is
    the browser's question, not a call: none (a view's cap naming ``OPTIONS`` counts it).
    """
    if not state.settings.enabled or preflight(request):
        return None
    resolver = get_resolver(getattr(request, "urlconf", None))
    where = (resolver, request.path_info)
    try:
        return state.resolved[where]
    except KeyError:
        pass
    try:
        match = resolver.resolve(request.path_info)
    except Resolver404:
        found = None
    else:
        found = state.view_route(match.view_name, match.func, resolver)
    if len(state.resolved) >= _RESOLVED:  # paths with ids are many: keep the recent ones
        state.resolved.clear()
    state.resolved[where] = found
    return found


def user_or_ip(trusted_proxies: str | Sequence[str] = (), *, header: str | None = None) -> KeyFunc:
    """Key requests as DRF does: the user's id when authenticated, else the client's
    address (:func:`client_ip` behind ``trusted_proxies``); dimension ``ident``
    (``user:42``, ``ip:203.0.113.7``), so users and addresses never share a budget.

    Needs ``request.user`` (``AuthenticationMiddleware`` before the freqguard middleware).
    """
    return user_or(client_ip(trusted_proxies, header=header))


def user_or(address: KeyFunc) -> KeyFunc:
    """:func:`user_or_ip` with the address ``address`` finds (a ``client`` key function)."""

    def key(request: RequestInfo) -> dict[str, object]:
        user = getattr(request.raw, "user", None)
        if user is not None and user.is_authenticated:
            return {"ident": f"user:{user.pk}"}
        return {"ident": f"ip:{address(request)['client']}"}  # type: ignore[index]

    key.needs_user = True  # type: ignore[attr-defined]
    return key


KEY_MAKERS.extend([user_or_ip, user_or])


def guard() -> Guard:
    """The sync Guard the integration decides with (to reset, refund or peek)."""
    return current().guard()


def peek(request: HttpRequest, name: str) -> Decision:
    """What ``request`` would get from the caps named ``name`` (``@capped(..., name=name)``),
    keyed as they key it; counts nothing (django-ratelimit's ``is_ratelimited(request,
    group=name)`` is ``not peek(request, name).allowed``). Answers before any of those
    views has served a request; with ``FREQGUARD_ENABLED = False``, allowed, every rule
    whole, as the caps are then.

    Raises:
        ConfigError: no cap of that name.
        BadRequest, SkipRequest: as the caps' key function raises them.
    """
    return _named(request, name, count=False)


def hit(request: HttpRequest, name: str) -> Decision:
    """Count ``request`` against the caps named ``name``, as they would (django-ratelimit's
    ``is_ratelimited(..., increment=True)``: count a failed login, say), and return the
    decision; :func:`peek`'s errors, and nothing counted while switched off."""
    return _named(request, name, count=True)


def _named(request: HttpRequest, name: str, count: bool) -> Decision:
    state = current()
    route = state.named_route(name)
    if not state.settings.enabled:  # FREQGUARD_ENABLED = False: nothing capped, nor keyed
        rules = [i if isinstance(i, Rule) else Rule(i) for part in route.keyed for i in part.items]
        return Decision(route.name, True, 0.0, (), tuple((r, r.capacity, 0, 0) for r in rules))
    ctx = state.decider().prepare(route, request_info(request))
    guard = state.guard()
    try:
        return (guard.hit if count else guard.peek)(route.name, route.cost, **ctx)
    except Unfit as unfit:  # a cost past this request's capacity: the cap's 429
        return unfit.decision


def async_guard() -> AsyncGuard:
    """The AsyncGuard the integration decides with under ASGI."""
    return current().aguard()


def close() -> None:
    """Close the sync guards the integration made; it makes them anew when next used."""
    for made in drop():
        unclosed.append(made)


async def aclose() -> None:
    """Close every guard the integration made (the async ones on this event loop)."""
    close()
    while unclosed:
        await unclosed.pop().aclose()


class FreqGuardConfig(AppConfig):
    """Add ``"freqguard.integrations.django.FreqGuardConfig"`` to ``INSTALLED_APPS`` for
    ``manage.py check`` to report the ``FREQGUARD_*`` settings' problems."""

    name = "freqguard.integrations.django"
    label = "freqguard"
    verbose_name = "freqguard"

    def ready(self) -> None:
        checks.register(check_settings, "freqguard")
