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

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.apps import AppConfig
from django.core import checks
from django.http import HttpRequest, HttpResponseBase
from django.urls import Resolver404, get_resolver
from django.views import View

from freqguard.decorators.naming import implicit_name
from freqguard.errors import ConfigError
from freqguard.guard import AsyncGuard, Guard
from freqguard.integrations._decide import Answer, Route
from freqguard.integrations._django_settings import check_settings
from freqguard.integrations._django_state import (
    Marks,
    State,
    ViewCap,
    current,
    drop,
    marks_of,
    request_info,
    response,
    unclosed,
)
from freqguard.integrations._http import (
    BadRequest,
    KeyFunc,
    RequestInfo,
    client_ip,
    header,
    rule_items,
)
from freqguard.policy import Policy
from freqguard.rules import Rule, check_name

__all__ = [
    "BadRequest",
    "FreqGuardConfig",
    "FreqGuardMiddleware",
    "aclose",
    "async_guard",
    "capped",
    "client_ip",
    "close",
    "exempt",
    "guard",
    "header",
    "user_or_ip",
]

V = TypeVar("V")
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
        marks = request.freqguard = Marks(middleware=True)  # type: ignore[attr-defined]
        if found is None:  # a DRF throttle or a method's cap may still decide
            return _with_headers(state, marks, self.get_response(request))
        route, cap = found
        answer = state.decider().decide(state.guard().hit, route, request_info(request))
        denied = _noted(marks, cap, answer)
        if denied is not None:
            return denied
        return _with_headers(state, marks, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> Response:
        state = current()
        found = _route_of(state, request)
        marks = request.freqguard = Marks(middleware=True)  # type: ignore[attr-defined]
        if found is None:  # a DRF throttle or a method's cap may still decide
            return _with_headers(state, marks, await self.get_response(request))
        route, cap = found
        if _needs_user(route):
            await sync_to_async(_load_user)(request)
        guard = state.aguard()
        answer = await state.adecider().adecide(guard.hit, route, request_info(request))
        denied = _noted(marks, cap, answer)
        if denied is not None:
            return denied
        return _with_headers(state, marks, await self.get_response(request))


def _route_of(state: State, request: HttpRequest) -> tuple[Route, ViewCap | None] | None:
    """The route of the view the request resolves to (None: no view, or nothing caps it).

    Resolved here, as Django resolves it after the middleware chain (a cached resolver),
    and remembered by path: the view must be known before it runs, without a
    ``process_view`` hook whose mode would follow the handler's (a thread hop per request
    under ASGI).
    """
    if not state.settings.enabled:
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
        found = state.view_route(match.view_name, match.func)
    if len(state.resolved) >= _RESOLVED:  # paths with ids are many: keep the recent ones
        state.resolved.clear()
    state.resolved[where] = found
    return found


def _noted(marks: Marks, cap: ViewCap | None, answer: Answer) -> Response | None:
    """Note an answer on the request; the refusal to send, if refused."""
    if cap is not None:
        marks.decided.add(cap)
    marks.note(answer)  # a denial too: the tightest, whose headers the response keeps
    return None if answer.allowed else response(answer)


def _with_headers(state: State, marks: Marks, found: Response) -> Response:
    if marks.decisions:
        for name, value in state.headers(marks).items():
            found[name] = value
    return found


def _needs_user(route: Route) -> bool:
    return any(getattr(part.key, "needs_user", False) for part in route.parts)


def _load_user(request: Any) -> None:
    """Evaluate the lazy ``request.user`` (a session lookup): off the event loop."""
    user = getattr(request, "user", None)
    if user is not None:
        user.is_authenticated  # noqa: B018 -- evaluated for its side effect, the lookup


def user_or_ip(
    trusted_proxies: str | Sequence[str] = (), *, header: str = "x-forwarded-for"
) -> KeyFunc:
    """Key requests as DRF does: the user's id when authenticated, else the client's
    address (:func:`client_ip` behind ``trusted_proxies``); dimension ``ident``
    (``user:42``, ``ip:203.0.113.7``), so users and addresses never share a budget.

    Needs ``request.user`` (``AuthenticationMiddleware`` before the freqguard middleware).
    """
    address = client_ip(trusted_proxies, header=header)

    def key(request: RequestInfo) -> dict[str, object]:
        user = getattr(request.raw, "user", None)
        if user is not None and user.is_authenticated:
            return {"ident": f"user:{user.pk}"}
        return {"ident": f"ip:{address(request)['client']}"}  # type: ignore[index]

    key.needs_user = True  # type: ignore[attr-defined]
    return key


def capped(
    rule: str | Rule | Policy | Sequence[str | Rule],
    *,
    key: KeyFunc | None = None,
    cost: int = 1,
    name: str | None = None,
) -> Callable[[V], V]:
    """Cap a view: a function view (sync or async), a class-based view (decorate the
    class, or a method with ``method_decorator``).

    With the middleware installed, the cap of a function view or a decorated class is
    decided with the view's default limits, in one hit before the view runs. A method's cap
    (``method_decorator``) is decided when that method runs, on its own policy.

    Args:
        rule: rates (``"5/minute; 100/day"``), Rules, a list of them, or a Policy (its
            rules and ``on_error``).
        key: the key function (default ``FREQGUARD_KEY``, else the peer address).
        cost: what one request costs, charged to the default limits too (one hit).
        name: the policy's name (default ``django.<route name>``).

    Raises:
        ConfigError: a rate that does not parse, a bad cost or name, or a target that is
            neither a view function nor a class-based view.
    """
    on_error = None
    if isinstance(rule, Policy):
        items: tuple[Any, ...] = rule.rules
        on_error = rule.on_error
    else:
        items = rule_items(rule)
    if name is not None:
        check_name("policy name", name)
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise ConfigError(f"cost must be an integer >= 0, got {cost!r}")
    if key is not None and not callable(key):
        raise ConfigError(f"key must be a key function (client_ip()), got {key!r}")

    cap = ViewCap(items, key, cost, name, "", on_error)

    def apply(target: V) -> V:
        _check_target("capped", target)
        if not cap.alone:  # the first target names it: method_decorator applies it per call
            cap.alone = implicit_name(target, prefix="django.view")  # type: ignore[arg-type]
        if isinstance(target, type):
            return _cap_class(target, cap)  # type: ignore[return-value]
        return _cap_view(target, cap)  # type: ignore[arg-type, return-value]

    return apply


def exempt(target: V) -> V:
    """Exempt a view (function or class-based) from ``FREQGUARD_DEFAULT_LIMITS``; its own
    ``@capped`` still holds.

    Raises:
        ConfigError: for something neither a view function nor a class-based view.
    """
    _check_target("exempt", target)
    target._freqguard_exempt = True  # type: ignore[attr-defined]
    return target


def _check_target(method: str, target: object) -> None:
    if isinstance(target, type) and not issubclass(target, View):
        raise ConfigError(
            f"{method} takes a view function or a class-based view (a View), got {target!r}"
        )
    if not callable(target):
        raise ConfigError(f"{method} takes a view function or a class-based view, got {target!r}")


def _request_in(args: tuple[Any, ...]) -> Any:
    """The request among a view's arguments: first, or after ``self`` (a method)."""
    for arg in args[:2]:
        if hasattr(arg, "META"):
            return arg
    raise ConfigError(f"@capped view called without a request: {args!r}")


def _cap_view(view: Callable[..., Any], cap: ViewCap) -> Callable[..., Any]:
    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            request = _request_in(args)
            denied = await _adecide_alone(cap, request)
            if denied is not None:
                return denied
            return _own_headers(request, await view(*args, **kwargs))

        awrapper._freqguard_cap = cap  # type: ignore[attr-defined]
        return awrapper

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        request = _request_in(args)
        denied = _decide_alone(cap, request)
        if denied is not None:
            return denied
        return _own_headers(request, view(*args, **kwargs))

    wrapper._freqguard_cap = cap  # type: ignore[attr-defined]
    return wrapper


def _cap_class(cls: type[View], cap: ViewCap) -> type[View]:
    """Cap every request a class-based view dispatches (its ``dispatch``)."""
    original: Callable[..., Any] = cls.dispatch
    if getattr(cls, "view_is_async", False):  # dispatch returns the handler's coroutine

        async def adispatch(self: View, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            denied = await _adecide_alone(cap, request)
            if denied is not None:
                return denied
            return _own_headers(request, await original(self, request, *args, **kwargs))

        cls.dispatch = functools.wraps(original)(adispatch)  # type: ignore[method-assign,assignment]
    else:

        def dispatch(self: View, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            denied = _decide_alone(cap, request)
            if denied is not None:
                return denied
            return _own_headers(request, original(self, request, *args, **kwargs))

        cls.dispatch = functools.wraps(original)(dispatch)  # type: ignore[method-assign]
    cls._freqguard_cap = cap  # type: ignore[attr-defined]
    return cls


def _decide_alone(cap: ViewCap, request: Any) -> Response | None:
    """Decide a cap the middleware has not: the refusal, if refused."""
    marks = marks_of(request)
    state = current()
    if cap in marks.decided or not state.settings.enabled:
        return None
    route = state.alone_route(cap)
    answer = state.decider().decide(state.guard().hit, route, request_info(request))
    return _noted(marks, cap, answer)


async def _adecide_alone(cap: ViewCap, request: Any) -> Response | None:
    marks = marks_of(request)
    state = current()
    if cap in marks.decided or not state.settings.enabled:
        return None
    route = state.alone_route(cap)
    if _needs_user(route):
        await sync_to_async(_load_user)(request)
    guard = state.aguard()
    answer = await state.adecider().adecide(guard.hit, route, request_info(request))
    return _noted(marks, cap, answer)


def _own_headers(request: Any, found: Any) -> Any:
    """The rate-limit headers, when no middleware adds them."""
    marks = marks_of(request)
    if not marks.middleware and marks.decisions and isinstance(found, HttpResponseBase):
        return _with_headers(current(), marks, found)
    return found


def guard() -> Guard:
    """The sync Guard the integration decides with (to reset, refund or peek)."""
    return current().guard()


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
