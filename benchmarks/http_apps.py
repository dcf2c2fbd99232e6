"""The three apps the HTTP benchmark serves: bare, with freqguard, with slowapi.

Each caps ``GET /hello`` per client address with a fixed window (slowapi's default strategy) at
a limit high enough that every request is allowed: the benchmark measures the cost of
deciding, not of refusing.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

LIMIT = "1000000/minute"


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


def bare() -> Starlette:
    return Starlette(routes=[Route("/hello", hello)])


def freqguard() -> Starlette:
    from freqguard import AsyncGuard, Rule
    from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

    app = bare()
    # fixed window, as slowapi's default: a like-for-like comparison
    rule = Rule(LIMIT, by="client", strategy="fixed-window")
    app.add_middleware(FreqGuardMiddleware, guard=AsyncGuard(), limits=[Limit("/hello", rule)])
    return app


def slowapi() -> Starlette:
    from slowapi import Limiter
    from slowapi.middleware import SlowAPIASGIMiddleware
    from slowapi.util import get_remote_address

    app = bare()
    app.state.limiter = Limiter(key_func=get_remote_address, default_limits=[LIMIT])
    app.add_middleware(SlowAPIASGIMiddleware)
    return app
