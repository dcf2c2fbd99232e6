"""FastAPI (and Starlette) endpoints: a dependency for per-endpoint limits, and
:func:`enforce` for limits keyed on validated parameters; both decide on the ASGI
middleware's path (:mod:`freqguard.integrations.asgi`).
"""

from __future__ import annotations

import functools
import inspect
import json
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, cast

from freqguard.errors import extra_missing

try:  # the extra named (an ImportError saying how to install it)
    from starlette.exceptions import HTTPException
except ModuleNotFoundError as missing:
    raise extra_missing(missing, "starlette", __name__) from missing
from starlette.exceptions import WebSocketException
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from freqguard.config import Config
from freqguard.decision import Decision
from freqguard.engine.requests import Unfit
from freqguard.errors import BackendUnavailable, ConfigError
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
    KeyFunc,
    Limit,
    problem_detail,
    refuse_slowapi,
)
from freqguard.integrations.asgi import async_guard_for, request_info
from freqguard.policy import Policy
from freqguard.rules import Rule
from freqguard.strategy import Strategy

__all__ = ["Refused", "enforce", "limit_dependency", "refused_handler"]


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
    guard: Guard | AsyncGuard,
    policy: str,
    cost: int = 1,
    *,
    headers: str = "ietf",
    request: Request | None = None,
    response: Response | None = None,
    **ctx: object,
) -> Decision:
    """Hit ``policy``; on denial raise :class:`Refused` (an ``HTTPException(429)``).

    For FastAPI dependencies that key on validated parameters; give it the request and the
    response FastAPI gives a dependency, and it answers as the middleware does (the
    problem's ``instance``, the rate-limit headers on an admitted response)::

        async def per_user(user_id: int, request: Request, response: Response) -> int:
            await enforce(guard, "api", request=request, response=response, user=user_id)
            return user_id

    A store failure the policy's ``on_error`` does not answer raises :class:`Refused` with
    a 503. ``request`` and ``response`` are not dimensions: name none of them so.
    """
    profile = check_profile(headers)
    instance = None if request is None else request_info(request.scope).path
    try:
        decision = await async_guard_for(guard).hit(policy, cost, **ctx)
    except BackendUnavailable as error:
        answer = unavailable(error, instance)
        raise Refused(answer, json.loads(answer.body)["detail"]) from error
    except Unfit as error:  # a cost past this request's capacity: the store's denial, a 429
        answer = answer_for(error.decision, profile, instance, unfit=error)  # never retried
        raise Refused(answer, str(error)) from None
    answer = answer_for(decision, profile, instance)
    if not decision.allowed:
        raise Refused(answer, problem_detail(decision))
    if response is not None:
        response.headers.update(answer.headers)
    return decision


def limit_dependency(
    guard: Guard | AsyncGuard | Config,
    rule: str | Rule | Sequence[str | Rule] | None = None,
    *,
    key: KeyFunc | None = None,
    cost: int = 1,
    name: str | None = None,
    headers: str = "ietf",
    on_error: object = None,
    **theirs: NoReturn,
) -> Callable[..., Awaitable[Decision | None]]:
    """A FastAPI dependency: ``Depends(limit_dependency(guard, "5/minute", name="login"))``.

    Decided on the same path as the middleware. Denials raise :class:`Refused` (429, 400
    when the key refuses the request, 503 when the store fails and ``on_error`` is
    ``"raise"``); the response FastAPI makes of an endpoint's return value gets the
    rate-limit headers. The dependency's value is the decision (None for a request its key
    skipped): an endpoint that returns a Response of its own adds them, ``decision:
    Decision = Depends(...)``, then ``JSONResponse(..., headers=decision.headers())``.
    On a WebSocket route a denied handshake is closed with 1008, as the middleware does.
    ``on_error`` as for
    :class:`Limit`. ``rule`` as for :class:`Limit`: rate strings, or Rules (one with
    ``rate_for`` decides a tier per request, from the values the key function gives).

    Raises:
        ConfigError: what :class:`Limit` refuses, and a concurrency rule (a dependency
            returns before its endpoint: the middleware holds a lease while it runs).
    """
    refuse_slowapi(theirs, "limit_dependency", "limit_dependency")
    if rule is None:  # limit_dependency("5/minute"): the guard left out
        raise ConfigError(
            f"limit_dependency takes the guard first: limit_dependency(guard, {guard!r}, "
            "name=...), the guard an AsyncGuard, a Guard or a Config"
        )
    if name is None:
        raise ConfigError(
            "limit_dependency needs name=: what its budget is called (its keys), "
            "limit_dependency(guard, '5/minute', name='login')"
        )
    if isinstance(rule, Policy):
        raise ConfigError(
            f"limit_dependency takes rates or Rules, not Policy {rule.name!r}: give its "
            f"rules, limit_dependency(guard, policy.rules, name={rule.name!r}) (on_error= "
            "here), or cap the route with FreqGuardMiddleware and Limit(path, policy)"
        )
    listed = isinstance(rule, Sequence) and not isinstance(rule, (str, bytes))
    limit = Limit(
        "/{rest:path}",
        list(cast(Sequence[str | Rule], rule)) if listed else rule,
        key=key,
        cost=cost,
        name=name,
        on_error=on_error,
    )
    aguard = async_guard_for(guard)
    route = compile_limit(limit)
    given = limit.items.rules if isinstance(limit.items, Policy) else limit.items
    if any(isinstance(r, Rule) and r.strategy is Strategy.CONCURRENCY for r in given):
        raise ConfigError(
            f"limit_dependency {name!r}: a concurrency rule holds a lease while the request "
            "runs, which a dependency cannot (it returns before the endpoint does): cap the "
            "route with FreqGuardMiddleware and a Limit, which holds it until the response"
        )
    decider = Decider(aguard, [route], check_profile(headers))

    # an HTTPConnection: FastAPI gives one to a WebSocket route's dependency too
    async def decide(request: HTTPConnection, response: Response) -> Decision | None:
        info = request_info(request.scope, dict(request.path_params))
        answer = await decider.adecide(aguard.hit, route, info)
        if not answer.allowed and request.scope["type"] == "websocket":
            # closed as the middleware closes a denied handshake
            reason = {429: "rate limited", 503: "store unavailable"}.get(answer.status)
            raise WebSocketException(1008, reason or "bad request")
        if not answer.allowed:
            detail = (
                problem_detail(answer.decision)
                if answer.decision is not None
                else json.loads(answer.body)["detail"]
            )
            raise Refused(answer, detail)
        response.headers.update(answer.headers)
        return answer.decision  # None: the key skipped the request (SkipRequest)

    return _Dependency(decide, name)


class _Dependency:
    """What :func:`limit_dependency` returns: FastAPI awaits it, a coroutine function to
    ``inspect`` (``decide``'s code, name and signature: the request and the response, as any
    FastAPI release reads them); called with a function instead, as slowapi's
    ``@limiter.limit(...)`` decorates an endpoint, it says how it is used, where a bare
    ``TypeError`` named a missing ``response``."""

    def __init__(self, decide: Callable[..., Awaitable[Decision | None]], name: str) -> None:
        functools.update_wrapper(self, decide)
        self.__code__ = decide.__code__
        self.__defaults__ = decide.__defaults__
        self.__kwdefaults__ = decide.__kwdefaults__
        self.__globals__ = decide.__globals__  # where older FastAPI releases read the types
        if hasattr(inspect, "markcoroutinefunction"):  # Python 3.12+: say it outright too
            inspect.markcoroutinefunction(self)
        self._decide, self._name = decide, name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        """A descriptor, as a function is: ``inspect.isroutine`` takes it for one."""
        return self if instance is None else types.MethodType(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Awaitable[Decision | None]:
        if len(args) == 1 and not kwargs and callable(args[0]):
            given = getattr(args[0], "__name__", repr(args[0]))
            raise ConfigError(
                f"limit_dependency(...) makes a FastAPI dependency, not a decorator (given "
                f"{given}): give it to Depends, @app.post('/login', dependencies="
                f"[Depends(limit_dependency(guard, '5/minute', name={self._name!r}))]), or "
                "as a parameter, decision: Decision = Depends(limit_dependency(...)) "
                "(slowapi's @limiter.limit decorates; docs/coming-from/slowapi.md)"
            )
        return self._decide(*args, **kwargs)
