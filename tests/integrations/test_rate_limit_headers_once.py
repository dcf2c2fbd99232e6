"""A response carries one set of rate-limit numbers: where the app sets the middleware's
headers itself (a route's own ``limit_dependency`` under a catch-all ``Limit``, a WSGI
app's own), the middleware keeps the numbers nearest exhaustion (fewer remaining; the
app's when as near), never two values of one header (``x-ratelimit-remaining: 1, 99``: a
client cannot read it), found by a fresh reading of the slowapi page's own example."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import httpx
from fastapi import Depends, FastAPI

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend
from freqguard.integrations import wsgi
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, limit_dependency
from tests.conftest import START


def _get(app: Any, path: str, times: int) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return [await http.get(path) for _ in range(times)]

    return asyncio.run(run())


def test_a_dependencys_headers_under_a_catch_all_limit_are_one_set() -> None:
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    app = FastAPI()
    report_limit = limit_dependency(guard, "2/minute", name="report", headers="x-ratelimit")

    @app.get("/report", dependencies=[Depends(report_limit)])
    async def report() -> dict[str, str]:
        return {"report": "..."}

    app.add_middleware(
        FreqGuardMiddleware,
        guard=guard,
        limits=[Limit("/{rest:path}", "100/minute")],
        headers="x-ratelimit",
    )
    first, second = _get(app, "/report", 2)
    for response in (first, second):
        assert response.headers.get_list("x-ratelimit-remaining") == [
            response.headers["x-ratelimit-remaining"]
        ], response.headers
    # the route's own 2/minute is nearest exhaustion: its numbers
    assert [r.headers["x-ratelimit-remaining"] for r in (first, second)] == ["1", "0"]
    assert first.headers["x-ratelimit-limit"] == "2"


def test_the_middlewares_numbers_win_where_they_are_nearer_exhaustion() -> None:
    """The app says 99 remaining of its own; the middleware's limit of 1 a minute has 0:
    its numbers, the nearer, are the response's."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        own = [(b"x-ratelimit-limit", b"100"), (b"x-ratelimit-remaining", b"99")]
        await send({"type": "http.response.start", "status": 200, "headers": own})
        await send({"type": "http.response.body", "body": b"ok"})

    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    guarded = FreqGuardMiddleware(
        app, guard=guard, limits=[Limit("/x", "1/minute")], headers="x-ratelimit"
    )
    [response] = _get(guarded, "/x", 1)
    assert response.headers.get_list("x-ratelimit-remaining") == ["0"]
    assert response.headers.get_list("x-ratelimit-limit") == ["1"]


def test_a_wsgi_apps_own_headers_are_one_set() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("X-RateLimit-Limit", "2"), ("X-RateLimit-Remaining", "1")])
        return [b"ok"]

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    guarded = wsgi.FreqGuardMiddleware(
        app, guard=guard, limits=[Limit("/x", "100/minute")], headers="x-ratelimit"
    )
    with httpx.Client(transport=httpx.WSGITransport(app=guarded), base_url="http://t") as http:
        response = http.get("/x")
    assert response.headers.get_list("x-ratelimit-remaining") == ["1"]
    assert response.headers.get_list("x-ratelimit-limit") == ["2"]


def _flask_app(own: dict[str, str], limit: str) -> Any:
    from flask import Flask, make_response

    from freqguard.integrations.flask import FreqGuard

    app = Flask(__name__)
    app.config.update(FREQGUARD_DEFAULT_LIMITS=limit, FREQGUARD_HEADERS="x-ratelimit")
    FreqGuard(app, guard=Guard(MemoryBackend(), clock=ManualClock(START)))

    @app.get("/x")
    def x() -> Any:
        answer = make_response("ok")
        answer.headers.update(own)  # an upstream quota the view passes on
        return answer

    return app


def test_flask_keeps_a_views_own_headers_when_nearer_exhaustion() -> None:
    """Flask's extension replaced a view's own numbers with its own whoever was nearer:
    a view passing on an upstream quota of 0 left read 99 remaining; as the ASGI and WSGI
    middlewares, one set, the nearer."""
    own = {"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0"}
    response = _flask_app(own, "100/minute").test_client().get("/x")
    assert response.headers.getlist("X-RateLimit-Remaining") == ["0"]
    assert response.headers.getlist("X-RateLimit-Limit") == ["10"]


def test_flask_sends_its_numbers_where_they_are_nearer() -> None:
    own = {"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99"}
    response = _flask_app(own, "1/minute").test_client().get("/x")
    assert response.headers.getlist("X-RateLimit-Remaining") == ["0"]
    assert response.headers.getlist("X-RateLimit-Limit") == ["1"]


def _django_get(own: dict[str, str], limit: str) -> Any:
    import pytest

    pytest.importorskip("django")
    from tests.integrations import django_site

    django_site.setup()
    from django.http import HttpRequest, HttpResponse
    from django.test import Client, override_settings
    from django.urls import path

    from freqguard.integrations import django as fg_django

    def view(request: HttpRequest) -> HttpResponse:
        answer = HttpResponse("ok")
        for name, value in own.items():
            answer[name] = value
        return answer

    class Urls:
        urlpatterns = [path("x", view)]  # noqa: RUF012

    with override_settings(
        ROOT_URLCONF=Urls,
        MIDDLEWARE=django_site.SETTINGS["MIDDLEWARE"],
        FREQGUARD_BACKEND=Guard(MemoryBackend(), clock=ManualClock(START)),
        FREQGUARD_DEFAULT_LIMITS=limit,
        FREQGUARD_HEADERS="x-ratelimit",
    ):
        response = Client().get("/x")
    fg_django.close()
    return response


def test_django_keeps_a_views_own_headers_when_nearer_exhaustion() -> None:
    own = {"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0"}
    response = _django_get(own, "100/minute")
    assert response["X-RateLimit-Remaining"] == "0"
    assert response["X-RateLimit-Limit"] == "10"


def test_django_sends_its_numbers_where_they_are_nearer() -> None:
    own = {"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99"}
    response = _django_get(own, "1/minute")
    assert response["X-RateLimit-Remaining"] == "0"
    assert response["X-RateLimit-Limit"] == "1"


def test_a_drf_throttles_own_wait_is_the_429s_retry_after_under_the_middleware() -> None:
    """A throttle that overrides ``wait()`` (DRF's hook for the 429's ``Retry-After``) under
    the middleware: the throttle's wait is the answer's, not replaced by the middleware's
    (found by a DRF user's review: the middleware's overwrote it)."""
    import pytest

    pytest.importorskip("rest_framework")
    from tests.integrations import django_site

    django_site.setup()
    from django.test import Client, override_settings
    from django.urls import path
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from freqguard.integrations import django as fg_django
    from freqguard.integrations.drf import FreqGuardThrottle

    class Patient(FreqGuardThrottle):
        rate = "1/minute"

        def wait(self) -> float | None:
            return 99.0

    class View(APIView):
        throttle_classes = (Patient,)

        def get(self, request: Request) -> Response:
            return Response("ok")

    class Urls:
        urlpatterns = [path("w", View.as_view())]  # noqa: RUF012

    with override_settings(
        ROOT_URLCONF=Urls,
        MIDDLEWARE=django_site.SETTINGS["MIDDLEWARE"],
        FREQGUARD_BACKEND=Guard(MemoryBackend(), clock=ManualClock(START)),
    ):
        client = Client()
        codes = [client.get("/w") for _ in range(2)]
    fg_django.close()
    assert [r.status_code for r in codes] == [200, 429]
    assert codes[1]["Retry-After"] == "99"
