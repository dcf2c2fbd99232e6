"""A generic WSGI middleware: the same :class:`Limit` routes as the ASGI one.

::

    limits = [Limit("/api/{rest:path}", "100/minute")]
    app.wsgi_app = FreqGuardMiddleware(app.wsgi_app, guard=Guard(), limits=limits)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from freqguard.guard import Guard
from freqguard.headers import check_profile
from freqguard.integrations._http import (
    BadRequest,
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
    "header",
    "path_param",
    "request_info",
]

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def request_info(environ: dict[str, Any], params: dict[str, str] | None = None) -> RequestInfo:
    def read_headers() -> dict[str, list[str]]:
        # the server has joined repeated lines into one value: one line per header here
        return {
            key[5:].replace("_", "-").lower(): [value]
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }

    return RequestInfo(
        environ.get("REQUEST_METHOD", "GET"),
        environ.get("PATH_INFO", "/") or "/",
        read_headers,
        environ.get("REMOTE_ADDR"),
        params,
        environ,
    )


class FreqGuardMiddleware:
    """WSGI middleware: the first matching :class:`Limit` decides each request.

    Args:
        app: the WSGI application.
        guard: a sync Guard.
        limits: route patterns to rules, first match wins.
        headers: the header profile.
    """

    def __init__(
        self, app: WSGIApp, *, guard: Guard, limits: Sequence[Limit], headers: str = "ietf"
    ) -> None:
        self.app = app
        self.guard = guard
        self.limits = tuple(limits)
        self.profile = check_profile(headers)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        found = find(
            self.limits, environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/")
        )
        if found is None:
            return self.app(environ, start_response)
        limit, params = found
        path = environ.get("PATH_INFO", "/")
        try:
            ctx = context_of(limit.key, request_info(environ, params))
        except BadRequest as error:
            return _refuse(start_response, "400 Bad Request", bad_request_body(error, path), [])
        policy = limit.policy_for(tuple(ctx))
        self.guard.add_policy(policy)
        decision = self.guard.hit(policy.name, limit.cost, **ctx)
        extra = list(decision.headers(self.profile).items())
        if not decision.allowed:
            body = problem_body(decision, path)
            return _refuse(start_response, "429 Too Many Requests", body, extra)

        def start_with_headers(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            return start_response(status, [*headers, *extra], *exc)

        return self.app(environ, start_with_headers)


def _refuse(
    start_response: StartResponse, status: str, body: bytes, headers: list[tuple[str, str]]
) -> list[bytes]:
    """Answer with a problem document, without calling the app."""
    start_response(
        status,
        [
            ("Content-Type", "application/problem+json"),
            ("Content-Length", str(len(body))),
            *headers,
        ],
    )
    return [body]
