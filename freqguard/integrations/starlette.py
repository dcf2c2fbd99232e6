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

from freqguard.errors import extra_missing

try:  # the extra named here, not by the module that first needs it
    import starlette  # noqa: F401
except ModuleNotFoundError as missing:
    raise extra_missing(missing, "starlette", __name__) from missing

from freqguard.integrations.asgi import (
    BadRequest,
    FreqGuardMiddleware,
    Limit,
    SkipRequest,
    client_ip,
    header,
    path_param,
)
from freqguard.integrations.fastapi import Refused, enforce, limit_dependency, refused_handler

__all__ = [
    "BadRequest",
    "FreqGuardMiddleware",
    "Limit",
    "Refused",
    "SkipRequest",
    "client_ip",
    "enforce",
    "header",
    "limit_dependency",
    "path_param",
    "refused_handler",
]
