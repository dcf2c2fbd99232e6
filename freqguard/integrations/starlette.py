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

import inspect
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from freqguard.decision import Decision
from freqguard.decorators import _async_view
from freqguard.guard import AsyncGuard, Guard
from freqguard.headers import check_profile
from freqguard.integrations._http import (
    BadRequest,
    KeyFunc,
    Limit,
    RequestInfo,
    bad_request_body,
    client_ip,
    context_of,
    find,
    header,
    path_param,
    problem_body,
)

__all__ = [
    "BadRequest",
    "FreqGuardMiddleware",
    "Limit",
    "client_ip",
    "enforce",
    "header",
    "limit_dependency",
    "path_param",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def request_info(scope: Scope, params: dict[str, str] | None = None) -> RequestInfo:
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


def _encode(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class FreqGuardMiddleware:
    """Pure ASGI middleware: the first :class:`Limit` matching a request decides it.

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
        self.limits = tuple(limits)
        self.profile = check_profile(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        found = find(self.limits, scope.get("method", "GET"), scope["path"])
        if found is None:
            await self.app(scope, receive, send)
            return
        limit, params = found
        try:
            ctx = context_of(limit.key, request_info(scope, params))
        except BadRequest as error:
            await _refuse(scope, send, 400, bad_request_body(error, scope["path"]), [])
            return
        policy = limit.policy_for(tuple(ctx))
        self.guard.add_policy(policy)
        decision = await self.guard.hit(policy.name, limit.cost, **ctx)
        extra = _encode(decision.headers(self.profile))
        if not decision.allowed:
            await _refuse(scope, send, 429, problem_body(decision, scope["path"]), extra)
            return
        if scope["type"] == "websocket" or not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _refuse(
    scope: Scope, send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer without calling the app: a problem document, or a WebSocket close 1008."""
    if scope["type"] == "websocket":
        reason = "rate limited" if status == 429 else "bad request"
        await send({"type": "websocket.close", "code": 1008, "reason": reason})
        return
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def enforce(
    guard: Guard | AsyncGuard, policy: str, cost: int = 1, *, headers: str = "ietf", **ctx: object
) -> Decision:
    """Hit ``policy``; on denial raise Starlette's ``HTTPException(429)`` with the headers.

    For FastAPI dependencies that key on validated parameters::

        async def per_user(user_id: int) -> None:
            await enforce(guard, "api", user=user_id)
    """
    from starlette.exceptions import HTTPException

    decision = await _as_async(guard).hit(policy, cost, **ctx)
    if not decision.allowed:
        names = ", ".join(rule.id for rule in decision.denied_by)
        raise HTTPException(429, f"rate limited by {names}", headers=decision.headers(headers))
    return decision


def limit_dependency(
    guard: Guard | AsyncGuard,
    rule: str | Sequence[str],
    *,
    key: KeyFunc | None = None,
    cost: int = 1,
    name: str,
    headers: str = "ietf",
) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency: ``Depends(limit_dependency(guard, "5/minute", name="login"))``.

    Denials raise ``HTTPException(429)``; allowed responses get the rate-limit headers.
    """
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response

    limit = Limit(
        "/{rest:path}",
        list(rule) if not isinstance(rule, str) else rule,
        key=key,
        cost=cost,
        name=name,
    )
    aguard = _as_async(guard)

    async def dependency(request: Request, response: Response) -> None:
        try:
            ctx = context_of(limit.key, request_info(request.scope, dict(request.path_params)))
        except BadRequest as error:
            raise HTTPException(400, str(error)) from None
        policy = limit.policy_for(tuple(ctx))
        aguard.add_policy(policy)
        decision = await enforce(aguard, policy.name, cost, headers=headers, **ctx)
        response.headers.update(decision.headers(headers))

    # FastAPI reads parameter types from the signature; these annotations are strings here
    # (postponed evaluation) naming locally imported classes, so give it the classes.
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    dependency.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("request", kind, annotation=Request),
            inspect.Parameter("response", kind, annotation=Response),
        ]
    )
    return dependency
