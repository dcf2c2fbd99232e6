"""An adversarial review of three commits (leases under every exit, a slowapi user's port,
a new user's first hour): each test a defect they introduced or left, failing before its
fix. Time is pinned (``ManualClock``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, ClassVar

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend, Rule
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit
from tests.conftest import START

# an OPTIONS carrying Access-Control-Request-Method but no Origin: no browser sends one
# (every CORS request carries Origin, Fetch's "CORS-preflight request"); any client can
_NO_ORIGIN = {"access-control-request-method": "POST"}


def test_the_middleware_is_built_as_starlette_0_37_to_0_41_builds_it() -> None:
    """Starlette from 0.37 (freqguard's floor, ``starlette>=0.37.2``; FastAPI 0.110.1 pins
    ``<0.38``) through 0.41.2 builds each middleware as ``cls(app=app, *args, **kwargs)``
    (``Starlette.build_middleware_stack``). The port made ``app`` positional-only
    (``app, /, *, ...``, beside ``**theirs``): ``app=`` then lands in ``**theirs`` and
    the call fails, ``missing 1 required positional argument: 'app'``, so every app
    on those versions that adds the middleware (``app.add_middleware(FreqGuardMiddleware,
    ...)``, the documented way) fails at its first request."""

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await PlainTextResponse("ok")(scope, receive, send)

    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    cls, args, kwargs = Middleware(FreqGuardMiddleware, guard=guard, limits=[Limit("/a", "1/m")])
    built = cls(app=inner, *args, **kwargs)  # noqa: B026 (starlette 0.37.0 .. 0.41.2, verbatim)
    assert built.app is inner
    with pytest.raises(TypeError, match="app"):  # and none at all is still refused
        FreqGuardMiddleware(guard=guard, limits=[])


def _options_codes(headers: dict[str, str]) -> tuple[list[int], int]:
    """Three OPTIONS to a route whose own OPTIONS handler does work, behind CORSMiddleware
    and FreqGuardMiddleware (outermost) under ``Limit("/a", "1/minute")``: the codes, and
    how often the handler ran."""
    ran: list[int] = []

    async def describe(request: Request) -> PlainTextResponse:
        ran.append(1)  # the app's work: a schema built, a database asked
        return PlainTextResponse("GET, POST")

    app = Starlette(routes=[Route("/a", describe, methods=["OPTIONS"])])
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    app.add_middleware(FreqGuardMiddleware, guard=guard, limits=[Limit("/a", "1/minute")])

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [(await http.options("/a", headers=headers)).status_code for _ in range(3)]

    return asyncio.run(run()), len(ran)


def test_asgi_an_options_without_origin_is_no_preflight_and_counts() -> None:
    """An ``OPTIONS`` with ``Access-Control-Request-Method`` and no ``Origin`` is taken for
    a CORS preflight and passes a limit of every method uncounted; but CORSMiddleware
    answers a preflight only with an ``Origin`` (without one it hands the request to the
    app), so the app's own OPTIONS handler runs, as often as any client likes: one header
    lifts the limit off it. A browser's preflight always carries ``Origin``: requiring it
    costs a browser nothing and closes the bypass (slowapi, its counter on the endpoint,
    counts that request)."""
    codes, ran = _options_codes(_NO_ORIGIN)
    assert codes == [200, 429, 429]
    assert ran == 1


def test_wsgi_an_options_without_origin_is_no_preflight_and_counts() -> None:
    """The WSGI middleware's twin of the test above: ``HTTP_ACCESS_CONTROL_REQUEST_METHOD``
    alone, no ``HTTP_ORIGIN``, and the app's OPTIONS runs uncounted."""
    from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware

    ran: list[int] = []

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        ran.append(1)
        start_response("200 OK", [("content-type", "text/plain")])
        return [b"GET, POST"]

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    guarded = WSGIMiddleware(app, guard=guard, limits=[Limit("/a", "1/minute")])
    with httpx.Client(transport=httpx.WSGITransport(app=guarded), base_url="http://t") as http:
        codes = [http.options("/a", headers=_NO_ORIGIN).status_code for _ in range(3)]
    assert (codes, len(ran)) == ([200, 429, 429], 1)


def test_django_an_options_without_origin_is_no_preflight_and_counts(clock: ManualClock) -> None:
    """Django's twin: ``FREQGUARD_DEFAULT_LIMITS`` pass an ``OPTIONS`` carrying
    ``Access-Control-Request-Method`` without ``Origin`` uncounted, and the view's own
    ``OPTIONS`` (Django's ``View.options``, or one that does work) runs for every one."""
    pytest.importorskip("django")
    from tests.integrations import django_site

    django_site.setup()
    from django.http import HttpRequest, HttpResponse
    from django.test import Client, override_settings
    from django.urls import path

    from freqguard.integrations import django as fg_django

    ran: list[int] = []

    def view(request: HttpRequest) -> HttpResponse:
        ran.append(1)
        return HttpResponse("ok")

    class Urls:
        urlpatterns: ClassVar[list[Any]] = [path("a", view)]

    with override_settings(
        ROOT_URLCONF=Urls,
        MIDDLEWARE=django_site.SETTINGS["MIDDLEWARE"],
        FREQGUARD_BACKEND=Guard(MemoryBackend(), clock=clock),
        FREQGUARD_DEFAULT_LIMITS="1/minute",
    ):
        client = Client()
        asked = {"Access-Control-Request-Method": "POST"}
        codes = [client.options("/a", headers=asked).status_code for _ in range(3)]
    fg_django.close()
    assert (codes, len(ran)) == ([200, 429, 429], 1)


@pytest.mark.parametrize(
    ("rate", "every"),
    [("1/hour", "one every 3600 s"), ("1/day", "one every 86400 s"), ("2/hour", "1800 s")],
)
def test_check_names_a_slow_strict_rates_turn_without_an_exponent(rate: str, every: str) -> None:
    """``freqguard check`` describes a strict rate (a bucket of capacity 1) as "one every N
    ms", formatted ``{:g}``: from a million milliseconds on (one every 17 minutes or
    slower: ``1/hour``, a daily digest's ``1/day``) the line reads ``one every 3.6e+06
    ms``, a number a new user (whom the line was written for) has to decode."""
    from freqguard.cli import guarantee

    line = guarantee(Rule(rate, strategy="gcra", burst=1))
    assert "e+" not in line
    assert every in line


def test_the_middleware_refuses_an_enabled_that_is_no_bool() -> None:
    """``enabled=`` (slowapi's) read from the environment as it comes,
    ``enabled=os.environ.get("RATELIMIT_ENABLED", "true")``: ``"false"`` is a true
    string, and the middleware stays on while its user believes it off (and ``"0"``
    alike). Every other flag of freqguard's refuses what is not True or False
    (``FREQGUARD_ENABLED``, ``capped(shared=)``): this one is taken by its truth."""
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    app = Starlette()
    with pytest.raises(ConfigError, match="enabled"):
        FreqGuardMiddleware(app, guard=guard, limits=[], enabled="false")  # type: ignore[arg-type]


def test_a_failure_reading_the_headers_is_not_reported_as_a_missing_attribute() -> None:
    """``RequestInfo.__getattr__`` (the port's helpful "no attribute" error) also catches
    an AttributeError raised *inside* the ``headers`` property, Python's fallback for a
    property that raises one: a scope whose header lines are ``str`` (a hand-built scope,
    a middleware that adds ``("x-tenant", "t1")``) fails to decode, and the key function's
    ``request.headers`` reports "RequestInfo has no attribute 'headers' ... use .raw", an
    attribute the page lists, hiding ``'str' object has no attribute 'decode'``."""
    from freqguard.integrations.asgi import request_info

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [("x-tenant", "t1")]}
    info = request_info(scope)
    with pytest.raises(AttributeError) as raised:
        info.headers  # noqa: B018
    assert "decode" in str(raised.value)
    with pytest.raises(AttributeError, match="has no attribute 'state'"):
        getattr(info, "state")  # noqa: B009 (the helpful error holds for a framework's)
