"""A CORS preflight (``OPTIONS`` with ``Access-Control-Request-Method``) is the browser's
question before a call, not a call: the middlewares (ASGI, WSGI, Django) count it only
under a limit whose methods name ``OPTIONS``; a plain ``OPTIONS`` counts as any method."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, ClassVar

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit
from tests.conftest import START

_PREFLIGHT = {"origin": "https://app.example", "access-control-request-method": "POST"}


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _codes(limit: Limit, headers: dict[str, str]) -> list[int]:
    app = Starlette(routes=[Route("/a", _ok, methods=["GET", "POST", "OPTIONS"])])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    guarded = FreqGuardMiddleware(app, guard=guard, limits=[limit])

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=guarded, client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [(await http.options("/a", headers=headers)).status_code for _ in range(3)]

    return asyncio.run(run())


def test_asgi_preflights_pass_a_limit_of_every_method() -> None:
    assert _codes(Limit("/a", "1/minute"), _PREFLIGHT) == [200, 200, 200]


def test_asgi_preflights_count_under_a_limit_naming_options() -> None:
    assert _codes(Limit("/a", "1/minute", methods=["OPTIONS"]), _PREFLIGHT) == [200, 429, 429]


def test_asgi_a_plain_options_counts_as_any_method() -> None:
    assert _codes(Limit("/a", "1/minute"), {}) == [200, 429, 429]


def test_wsgi_preflights_pass_a_limit_of_every_method() -> None:
    from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("content-type", "text/plain")])
        return [b"ok"]

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    guarded = WSGIMiddleware(app, guard=guard, limits=[Limit("/a", "1/minute")])
    transport = httpx.WSGITransport(app=guarded)
    with httpx.Client(transport=transport, base_url="http://test") as http:
        preflights = [http.options("/a", headers=_PREFLIGHT).status_code for _ in range(2)]
        plain = [http.options("/a").status_code for _ in range(2)]
    assert (preflights, plain) == ([200, 200], [200, 429])


def test_django_preflights_pass_the_default_limits_and_a_view_cap(clock: ManualClock) -> None:
    pytest.importorskip("django")
    from tests.integrations import django_site

    django_site.setup()
    from django.http import HttpRequest, HttpResponse
    from django.test import Client, override_settings
    from django.urls import path

    from freqguard.integrations import django as fg_django
    from freqguard.integrations.django import capped

    @capped("1/minute", methods=["GET", "OPTIONS"])
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    def free(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    class Urls:
        urlpatterns: ClassVar[list[Any]] = [path("capped", view), path("free", free)]

    site = django_site.SETTINGS
    with override_settings(
        ROOT_URLCONF=Urls,
        MIDDLEWARE=site["MIDDLEWARE"],
        FREQGUARD_BACKEND=Guard(MemoryBackend(), clock=clock),
        FREQGUARD_DEFAULT_LIMITS="1/minute",
    ):
        client = Client()
        asked = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
        free_codes = [client.options("/free", headers=asked).status_code for _ in range(2)]
        capped_codes = [client.options("/capped", headers=asked).status_code for _ in range(2)]
        plain = [client.options("/free").status_code for _ in range(2)]
    fg_django.close()
    # the default limits pass preflights; the view's cap names OPTIONS: it counts them
    assert (free_codes, capped_codes, plain) == ([200, 200], [200, 429], [200, 429])
