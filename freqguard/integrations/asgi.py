"""A pure ASGI middleware: rate limits for any ASGI application, no framework needed.

::

    app = FreqGuardMiddleware(
        app,
        guard=AsyncGuard(),
        limits=[Limit("/api/sms", "10/minute", key=client_ip(["10.0.0.0/8"], header="x-real-ip"))],
    )

A denied request gets 429 with ``Retry-After`` and an RFC 9457 ``application/problem+json``
body naming the violated rules; every limited response carries rate-limit headers. A denied
WebSocket handshake is closed with code 1008 (policy violation). Other scopes pass through.
Starlette and FastAPI users import the same names from
:mod:`freqguard.integrations.starlette`, which adds FastAPI's dependencies.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any, NoReturn, cast

from freqguard.config import Config
from freqguard.decision import Decision
from freqguard.decorators.adapters import as_async as _as_async_guard
from freqguard.errors import ConfigError
from freqguard.guard import AsyncGuard, Guard, not_a_guard
from freqguard.headers import check_profile, merged
from freqguard.integrations._decide import Answer, Decider, Route
from freqguard.integrations._first_match import checked_limits, compile_limits
from freqguard.integrations._held import arelease_each, leasing_async
from freqguard.integrations._http import (
    LIMITER_ARGUMENTS,
    BadRequest,
    Limit,
    RequestInfo,
    SkipRequest,
    client_ip,
    header,
    path_param,
    refuse_slowapi,
)
from freqguard.integrations._routes import route_path
from freqguard.policy import Policy

__all__ = [
    "BadRequest",
    "FreqGuardMiddleware",
    "Limit",
    "SkipRequest",
    "async_guard_for",
    "client_ip",
    "header",
    "path_param",
    "request_info",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def request_info(scope: Scope, params: Mapping[str, str] | None = None) -> RequestInfo:
    def read_headers() -> dict[str, list[str]]:
        headers: dict[str, list[str]] = {}
        for name, value in scope.get("headers", ()):
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        return headers

    client = scope.get("client")
    return RequestInfo(
        scope.get("method", "GET"),
        scope["path"],
        read_headers,
        client[0] if client else None,
        params,
        scope,
    )


def async_guard_for(guard: Guard | AsyncGuard | Config) -> AsyncGuard:
    """The AsyncGuard an ASGI app decides with: ``guard`` itself, the async face of a sync
    Guard (made once per guard), or a new one made from a configuration (call it once)."""
    if isinstance(guard, Config):
        return guard.async_guard()
    if not isinstance(guard, (Guard, AsyncGuard)):
        raise not_a_guard(guard, "an ASGI integration", "an AsyncGuard, a Guard or a Config")
    return guard if isinstance(guard, AsyncGuard) else _as_async_guard(guard)


class FreqGuardMiddleware:
    """Pure ASGI middleware: the first :class:`Limit` matching a request decides it.

    The limits are compiled when the middleware is built; each policy is registered on the
    guard once.

    Args:
        app: the ASGI application.
        guard: an AsyncGuard (a sync Guard is run off the event loop), or a
            :class:`~freqguard.config.Config` to make one from.
        limits: route patterns to rules, first match wins: put the narrower first (one
            that an earlier one wholly covers is refused).
        headers: the header profile (``"ietf"``, ``"draft6"``, ``"x-ratelimit"``, ``"none"``).
        refused: answers a denied HTTP request in place of the problem document: a function
            (or an async one) of the request's scope and its :class:`~freqguard.Decision`
            returning the ASGI app that answers it (a Starlette ``Response`` is one), sent
            with the rate-limit headers it does not set itself; the app's own exception
            handlers never see a request the middleware refuses (slowapi's
            ``_rate_limit_exceeded_handler``, replaced).
        enabled: False lets every request through, uncapped (slowapi's ``enabled``): also
            an attribute, ``middleware.enabled = False``, for a test run or an emergency.

    Raises:
        ConfigError: a Limit an earlier one wholly covers (its methods, and every path it
            matches), which could never decide a request: put the narrower first; a
            ``refused`` that is not a function of two arguments, or is an exception
            handler's ``(request, exc)``; slowapi's ``Limiter`` arguments, naming ours; an
            ``enabled`` that is not True or False.
    """

    def __init__(
        self,
        app: ASGIApp | None = None,
        /,  # for mypy beside **theirs; starlette 0.37 to 0.41.2 pass it by name, app=app
        *,
        guard: Guard | AsyncGuard | Config | None = None,
        limits: Sequence[Limit],
        headers: str = "ietf",
        refused: Callable[[Scope, Decision], Awaitable[ASGIApp] | ASGIApp] | None = None,
        enabled: bool = True,
        **theirs: NoReturn,
    ) -> None:
        if app is None and "app" in theirs:  # Starlette.build_middleware_stack before 0.41.3
            app = cast("ASGIApp", theirs.pop("app"))
        if app is None:
            raise TypeError("FreqGuardMiddleware() missing 1 required argument: 'app'")
        refuse_slowapi(theirs, "FreqGuardMiddleware", "FreqGuardMiddleware", LIMITER_ARGUMENTS)
        if not isinstance(enabled, bool):  # "false" from the environment is a true string
            raise ConfigError(f"enabled must be True or False, got {enabled!r}")
        if refused is not None and (not _takes_two(refused) or _a_handler(refused)):
            # a Response is a 3-argument app; slowapi's handler takes (request, exc)
            raise ConfigError(
                f"refused= takes a function of (scope, decision) that returns the answer's "
                f"ASGI app (a Starlette Response), got {refused!r}" + _HANDLER * _a_handler(refused)
            )
        self.enabled = enabled
        self._refused = refused
        if guard is None:  # slowapi's Limiter holds its storage: here the guard does
            raise ConfigError(
                "FreqGuardMiddleware needs guard=: FreqGuardMiddleware(app, "
                "guard=AsyncGuard(backend), limits=[...]) (a Guard, or a Config, too)"
            )
        self.app = app
        self.guard = async_guard_for(guard)
        self._hit = self.guard.hit
        # each route's policy when it was seen to hold no leases (a deploy may give it some)
        self._plain: dict[Route, Policy] = {}
        self.limits = checked_limits(limits)
        self.decider = Decider(self.guard, compile_limits(self.limits), check_profile(headers))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if (kind != "http" and kind != "websocket") or not self.enabled:
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET")
        # a browser's preflight carries Origin: without it, any client's OPTIONS (which
        # CORSMiddleware hands to the app) would pass uncounted by adding one header
        preflight = method == "OPTIONS" and {name for name, _ in scope["headers"]} >= _PREFLIGHT
        found = self.decider.find(method, route_path(scope), preflight)
        if found is None:
            await self.app(scope, receive, send)
            return
        route, params = found
        plain = self._plain.get(route)
        if plain is None or self.guard.policies.get(route.name) is not plain:
            await self._leasing(route, params, scope, receive, send)  # leases, or not known
            return
        answer = await self.decider.adecide(self._hit, route, request_info(scope, params))
        await self._answered(answer, scope, receive, send)

    async def _leasing(
        self, route: Route, params: Mapping[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request of a route whose policy holds leases (a concurrency rule), or not known
        yet: the lease taken is held until the app has answered (its time in flight)."""
        held: list[Decision] = []
        hit = leasing_async(self.guard, held)
        answer = await self.decider.adecide(hit, route, request_info(scope, params))
        policy = self.guard.policies.get(route.name)  # registered by now, unless refused
        if policy is not None and not policy.leases:
            self._plain[route] = policy
        else:
            self._plain.pop(route, None)
        try:
            await self._answered(answer, scope, receive, send)
        finally:
            await arelease_each(self.guard, held)

    async def _answered(self, answer: Answer, scope: Scope, receive: Receive, send: Send) -> None:
        """The app called (its answer given the decision's headers), or the refusal sent."""
        kind = scope["type"]
        if not answer.allowed:
            if self._refused is None or answer.decision is None or kind != "http":
                await _refuse(scope, send, answer)
            else:
                await self._answer_refused(answer, scope, receive, send)
            return
        extra = answer.raw_headers() if kind == "http" else None
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                own = message.get("headers", ())
                message["headers"] = merged(own, extra, message.get("status"))
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _answer_refused(
        self, answer: Answer, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A denial answered by ``refused=``'s app, with the rate-limit headers it does not
        set itself (not the problem document's content headers)."""
        refused, decision = self._refused, answer.decision
        assert refused is not None
        assert decision is not None
        made = refused(scope, decision)
        app = await made if inspect.isawaitable(made) else made
        ours = [(k, v) for k, v in answer.raw_headers() if not k.startswith(b"content-")]

        async def send_with_ours(message: Message) -> None:
            if message["type"] == "http.response.start":
                given = list(message.get("headers", ()))
                named = {name.lower() for name, _ in given}
                message["headers"] = [*given, *(h for h in ours if h[0] not in named)]
            await send(message)

        await app(scope, receive, send_with_ours)


_PREFLIGHT = frozenset((b"origin", b"access-control-request-method"))

_HANDLER = (
    ": that is an exception handler's (request, exc), slowapi's _rate_limit_exceeded_"
    "handler's; write async def refused(scope, decision) -> Response, reading the "
    "decision's retry_after and denied_by"
)


def _a_handler(function: object) -> bool:
    """Whether ``function`` is an exception handler, ``(request: Request, exc)``: its first
    parameter a request by its annotation, or the two named ``request`` and ``exc``."""
    try:
        first, *rest = inspect.signature(function).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    given = first.annotation  # a class, or its name (under from __future__ import annotations)
    shown = given if isinstance(given, str) else getattr(given, "__name__", "")
    named = first.name == "request" and bool(rest) and rest[0].name in ("exc", "exception")
    return named or shown.rpartition(".")[2] in ("Request", "HTTPConnection")


def _takes_two(function: object) -> bool:
    """Whether ``function`` can be called with two arguments."""
    if not callable(function):
        return False
    try:
        inspect.signature(function).bind(None, None)
    except (TypeError, ValueError):
        return False
    return True


async def _refuse(scope: Scope, send: Send, answer: Answer) -> None:
    """Answer without calling the app: a problem document, or a WebSocket close 1008."""
    if scope["type"] == "websocket":
        reason = {429: "rate limited", 503: "store unavailable"}.get(answer.status, "bad request")
        await send({"type": "websocket.close", "code": 1008, "reason": reason})
        return
    await send(
        {"type": "http.response.start", "status": answer.status, "headers": answer.raw_headers()}
    )
    await send({"type": "http.response.body", "body": answer.body})
