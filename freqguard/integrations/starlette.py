"""Starlette / FastAPI: a pure ASGI middleware, and a dependency for per-endpoint limits.

::

    app.add_middleware(
        FreqGuardMiddleware,
        guard=AsyncGuard(),
        limits=[Limit("/api/sms", "10/minute", key=client_ip(["10.0.0.0/8"], header="x-real-ip"))],
    )

A denied request gets 429 with ``Retry-After`` and an RFC 9457 ``application/problem+json``
body naming the violated rules; every limited response carries rate-limit headers. A denied
WebSocket handshake is closed with code 1008 (policy violation). Other scopes pass through.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from freqguard.decision import Decision
from freqguard.decorators.adapters import async_view as _async_view
from freqguard.errors import BackendUnavailable
from freqguard.guard import AsyncGuard, Guard
from freqguard.headers import check_profile
from freqguard.integrations._decide import (
    Answer,
    Decider,
    answer_for,
    compile_limit,
    unavailable,
)
from freqguard.integrations._http import (
    BadRequest,
    KeyFunc,
    Limit,
    RequestInfo,
    client_ip,
    header,
    path_param,
    problem_detail,
)
from freqguard.integrations._routes import route_path

__all__ = [
    "BadRequest",
    "FreqGuardMiddleware",
    "Limit",
    "Refused",
    "client_ip",
    "enforce",
    "header",
    "limit_dependency",
    "path_param",
    "refused_handler",
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


def _as_async(guard: Guard | AsyncGuard) -> AsyncGuard:
    return guard if isinstance(guard, AsyncGuard) else _async_view(guard)


class FreqGuardMiddleware:
    """Pure ASGI middleware: the first :class:`Limit` matching a request decides it.

    The limits are compiled when the middleware is built; each policy is registered on the
    guard once.

    Args:
        app: the ASGI application.
        guard: an AsyncGuard (a sync Guard is run off the event loop).
        limits: route patterns to rules, first match wins.
        headers: the header profile (``"ietf"``, ``"draft6"``, ``"x-ratelimit"``, ``"none"``).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        guard: Guard | AsyncGuard,
        limits: Sequence[Limit],
        headers: str = "ietf",
    ) -> None:
        self.app = app
        self.guard = _as_async(guard)
        self._hit = self.guard.hit
        self.limits = tuple(limits)
        self.decider = Decider(
            self.guard, [compile_limit(limit) for limit in self.limits], check_profile(headers)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)
            return
        found = self.decider.find(scope.get("method", "GET"), route_path(scope))
        if found is None:
            await self.app(scope, receive, send)
            return
        route, params = found
        answer = await self.decider.adecide(self._hit, route, request_info(scope, params))
        if not answer.allowed:
            await _refuse(scope, send, answer)
            return
        extra = answer.raw_headers() if kind == "http" else None
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


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


class Refused(HTTPException):
    """A 429 (or 400) from :func:`limit_dependency` or :func:`enforce`, with its answer.

    It is an ``HTTPException``: with FastAPI's default handler the client gets the status,
    the rate-limit headers and ``{"detail": ...}``. Register :func:`refused_handler` to send
    the middleware's own problem document instead::

        app = FastAPI(exception_handlers={Refused: refused_handler})
    """

    def __init__(self, answer: Answer, detail: str) -> None:
        kept = {k: v for k, v in answer.headers.items() if not k.startswith("Content-")}
        super().__init__(answer.status, detail, headers=kept)
        self.answer = answer


async def refused_handler(request: Request, exc: Exception) -> Response:
    """Send a :class:`Refused` as the middleware would: problem+json, the same headers."""
    if not isinstance(exc, Refused):
        raise exc
    answer = exc.answer
    return Response(answer.body, answer.status, headers=answer.headers)


async def enforce(
    guard: Guard | AsyncGuard, policy: str, cost: int = 1, *, headers: str = "ietf", **ctx: object
) -> Decision:
    """Hit ``policy``; on denial raise :class:`Refused` (an ``HTTPException(429)``).

    For FastAPI dependencies that key on validated parameters::

        async def per_user(user_id: int) -> None:
            await enforce(guard, "api", user=user_id)

    The problem document names no ``instance`` (the request is not known here). A store
    failure the policy's ``on_error`` does not answer raises :class:`Refused` with a 503.
    """
    try:
        decision = await _as_async(guard).hit(policy, cost, **ctx)
    except BackendUnavailable as error:
        answer = unavailable(error, None)
        raise Refused(answer, json.loads(answer.body)["detail"]) from error
    if not decision.allowed:
        raise Refused(answer_for(decision, check_profile(headers), None), problem_detail(decision))
    return decision


def limit_dependency(
    guard: Guard | AsyncGuard,
    rule: str | Sequence[str],
    *,
    key: KeyFunc | None = None,
    cost: int = 1,
    name: str,
    headers: str = "ietf",
    on_error: object = None,
) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency: ``Depends(limit_dependency(guard, "5/minute", name="login"))``.

    Decided on the same path as the middleware. Denials raise :class:`Refused` (429, 400
    when the key refuses the request, 503 when the store fails and ``on_error`` is
    ``"raise"``); allowed responses get the rate-limit headers. ``on_error`` as for
    :class:`Limit`.
    """
    limit = Limit(
        "/{rest:path}",
        list(rule) if not isinstance(rule, str) else rule,
        key=key,
        cost=cost,
        name=name,
        on_error=on_error,
    )
    aguard = _as_async(guard)
    route = compile_limit(limit)
    decider = Decider(aguard, [route], check_profile(headers))

    async def dependency(request: Request, response: Response) -> None:
        info = request_info(request.scope, dict(request.path_params))
        answer = await decider.adecide(aguard.hit, route, info)
        if not answer.allowed:
            detail = (
                problem_detail(answer.decision)
                if answer.decision is not None
                else json.loads(answer.body)["detail"]
            )
            raise Refused(answer, detail)
        response.headers.update(answer.headers)

    return dependency
