"""A generic WSGI middleware: the same :class:`Limit` routes as the ASGI one.

::

    limits = [Limit("/api/{rest:path}", "100/minute")]
    app.wsgi_app = FreqGuardMiddleware(app.wsgi_app, guard=Guard(), limits=limits)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from freqguard.decision import Decision
from freqguard.guard import Guard, not_a_guard
from freqguard.headers import check_profile, merged
from freqguard.integrations._decide import Decider, preflight
from freqguard.integrations._first_match import checked_limits, compile_limits
from freqguard.integrations._held import HeldBody, leasing, release_each
from freqguard.integrations._http import (
    BadRequest,
    Limit,
    RequestInfo,
    SkipRequest,
    client_ip,
    header,
    path_param,
)

__all__ = [
    "BadRequest",
    "FreqGuardMiddleware",
    "Limit",
    "SkipRequest",
    "client_ip",
    "header",
    "path_param",
    "request_info",
]

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def path_of(environ: Mapping[str, Any]) -> str:
    """``PATH_INFO`` as the URL's text: PEP 3333 hands its bytes decoded as latin-1, which
    read as UTF-8 (as werkzeug and ASGI servers read them) is what a pattern is written in:
    ``/café/1``, not ``/cafÃ©/1``."""
    raw = environ.get("PATH_INFO", "/") or "/"
    try:
        return str(raw.encode("latin-1").decode("utf-8", "replace"))
    except UnicodeEncodeError:  # a server that handed text already
        return str(raw)


def request_info(environ: dict[str, Any], params: Mapping[str, str] | None = None) -> RequestInfo:
    def read_headers() -> dict[str, list[str]]:
        # the server has joined repeated lines into one value: one line per header here
        return {
            key[5:].replace("_", "-").lower(): [value]
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }

    return RequestInfo(
        environ.get("REQUEST_METHOD", "GET"),
        path_of(environ),
        read_headers,
        environ.get("REMOTE_ADDR"),
        params,
        environ,
    )


class FreqGuardMiddleware:
    """WSGI middleware: the first matching :class:`Limit` decides each request.

    The limits are compiled when the middleware is built; each policy is registered on the
    guard once. A route whose policy has a concurrency rule holds a lease for each request
    it admits until the server closes the response (its time in flight).

    Args:
        app: the WSGI application.
        guard: a sync Guard.
        limits: route patterns to rules, first match wins: put the narrower first (one
            that an earlier one wholly covers is refused).
        headers: the header profile.

    Raises:
        ConfigError: a Limit an earlier one wholly covers (its methods, and every path it
            matches), which could never decide a request: put the narrower first.
    """

    def __init__(
        self, app: WSGIApp, *, guard: Guard, limits: Sequence[Limit], headers: str = "ietf"
    ) -> None:
        if not isinstance(guard, Guard):  # an AsyncGuard's hits would never be awaited
            raise not_a_guard(guard, "wsgi.FreqGuardMiddleware", "a Guard (WSGI is sync)")
        self.app = app
        self.guard = guard
        self.limits = checked_limits(limits)
        self.decider = Decider(guard, compile_limits(self.limits), check_profile(headers))

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        found = self.decider.find(method, path_of(environ), preflight(method, environ))
        if found is None:
            return self.app(environ, start_response)
        route, params = found
        held: list[Decision] = []  # a lease taken for this request, if its policy holds them
        try:  # from the take on, until the body holds it: a Ctrl-C between gives it back too
            answer = self.decider.decide(
                leasing(self.guard, held), route, request_info(environ, params)
            )
            extra = list(answer.headers.items())
            if not answer.allowed:
                start_response(f"{answer.status} {_REASONS[answer.status]}", extra)
                return [answer.body]

            def start_with_headers(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
                code = int(status[:3]) if status[:3].isdigit() else None
                return start_response(status, merged(headers, extra, code), *exc)

            body = self.app(environ, start_with_headers)
            return HeldBody(body, partial(release_each, self.guard, held)) if held else body
        except BaseException:
            release_each(self.guard, held)
            raise


_REASONS = {400: "Bad Request", 429: "Too Many Requests", 503: "Service Unavailable"}
