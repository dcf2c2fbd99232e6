"""Every answer of the service other than a 200: RFC 9457 problem+json.

A handler raises :class:`Problem`; :data:`HANDLERS` turn it, Starlette's own refusals and
any exception nobody foresaw into the same body. What the store or an unforeseen exception
said goes to the log (``freqguard.service``), never to the client: it holds hosts, ports,
a client's repr, paths on the server.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

import freqguard.service.schema as schema
from freqguard.engine.breaker import CircuitOpen
from freqguard.engine.settings import shortened
from freqguard.errors import BackendUnavailable, ConfigError, FreqGuardError, PartialFailure
from freqguard.observe.base import RepeatFilter

__all__ = [
    "HANDLERS",
    "RESTING",
    "Problem",
    "from_store",
    "invalid",
    "shown",
    "store_failed",
    "unforeseen",
]

log = logging.getLogger("freqguard.service")

MEDIA_TYPE = "application/problem+json"
#: RFC 9110's names, where Python's http module still has the older ones.
_TITLES = {413: "Content Too Large", 422: "Unprocessable Content"}
MAX_DETAIL = 500  # characters of a problem's detail
UNFORESEEN = "the service failed unexpectedly; the details are in its log"
RESTING = "the store failed repeatedly and is given a rest (the circuit is open)"


class Problem(Exception):
    """An answer other than 200: a status, what went wrong (``detail``), the request field
    it is about (``field``: ``context.recipient``, ``contexts[3].user``, ``cost``...) and
    any headers it needs (``WWW-Authenticate``, ``Allow``, ``Retry-After``)."""

    def __init__(
        self,
        status: int,
        detail: str,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        detail = shortened(detail, MAX_DETAIL)  # an engine's message may quote the client
        super().__init__(detail)
        self.status, self.detail, self.field = status, detail, field
        self.headers = dict(headers or {})

    def response(self, request: Request) -> Response:
        body = schema.Problem(
            type="about:blank",
            title=_TITLES.get(self.status) or HTTPStatus(self.status).phrase,
            status=self.status,
            detail=self.detail,
            instance=request.url.path,
            field=self.field,
        )
        return Response(schema.encode(body), self.status, self.headers, media_type=MEDIA_TYPE)


def invalid(field: str, detail: str) -> Problem:
    """A 422: the request's ``field`` is not what the call takes."""
    return Problem(422, f"{field}: {detail}", field)


def shown(value: object, most: int = 40) -> str:
    """A value as a message may show it: short, whatever the client sent."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if value is None or isinstance(value, bool):  # as the client wrote it
        return "null" if value is None else str(value).lower()
    return shortened(repr(value), most)


def store_failed(exc: BackendUnavailable, policy: str, logged: RepeatFilter) -> Problem:
    """A 503 saying, in an operator's words, what the store did; what it said (hosts,
    ports, a client's repr) goes to the log, through ``logged``: at once, then at most once
    a while per policy and kind, saying how many were not logged meanwhile (an outage
    answers every request with a 503, and a line each would flood the log)."""
    headers = {"retry-after": "1"}  # a store that failed: a second before a retry
    if isinstance(exc, CircuitOpen):
        detail = RESTING
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after)))
    elif isinstance(exc, PartialFailure):
        detail = "part of the store failed: some of the calls were applied, some were not"
    elif exc.answered and exc.sent:  # one server ran a batch's first calls, refused the next
        detail = "the store refused part of the calls; the others were applied"
    elif exc.answered:
        detail = "the store refused the call; nothing was applied"
    elif not exc.sent:
        detail = "the store could not be reached; nothing was applied"
    else:
        detail = "the store did not answer; the call may have been applied"
    held = logged.due((policy, detail))
    if held is not None:
        more = f" ({held} more since the last line)" if held else ""
        log.warning("freqguard serve: policy %r: %s: %s%s", policy, detail, exc, more)
    return Problem(503, detail, headers=headers)


def from_store(exc: ConfigError) -> bool:
    """Whether a ConfigError was the store's answer (a cluster node behind a ``redis://``
    URL), raised from the client's own error, rather than about the request."""
    cause = exc.__cause__
    return cause is not None and not isinstance(cause, FreqGuardError)


def unforeseen(exc: BaseException, request: Request) -> Problem:
    """A 500 that tells nothing but where to look; the traceback goes to the log."""
    log.error(
        "freqguard serve: %s %s failed unexpectedly",
        request.method,
        request.url.path,
        exc_info=(type(exc), exc, exc.__traceback__),
    )
    return Problem(500, UNFORESEEN)


async def _problem(request: Request, exc: Exception) -> Response:
    """A handler's :class:`Problem`; anything else is the last resort, outside the routes'
    own (Starlette's ServerErrorMiddleware, which raises the exception on after this answer:
    the server logs its traceback)."""
    return (exc if isinstance(exc, Problem) else Problem(500, UNFORESEEN)).response(request)


async def _http(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (the router's 404 and 405) as problems."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        detail = "nothing is served at this path (the API is in /openapi.json)"
    elif exc.status_code == 405:
        allowed = headers.get("allow", headers.get("Allow", ""))
        detail = f"this path takes {allowed or 'other methods'}, not {shown(request.method, 12)}"
    else:
        detail = str(exc.detail)
    return Problem(exc.status_code, detail, headers=headers).response(request)


HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    Problem: _problem,
    HTTPException: _http,
    Exception: _problem,
}
