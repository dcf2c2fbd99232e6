"""A request whose cost is past its capacity as decided (a per-key limit of 3 a minute
under a route that costs 5) is a denial no retry can turn: its 429 says so, and sends no
``Retry-After`` (it told a client to come back in N seconds, when the same request is
refused again, for as long as the per-key limit stands: a promise never kept)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend, Policy, Rule
from tests.conftest import START


def _policy() -> Policy:
    return Policy("p", Rule("10/minute", by="user", name="r"))


def _check(status: int, headers: Any, body: bytes) -> None:
    assert status == 429
    assert "retry-after" not in {name.lower() for name, _ in headers.items()}, dict(headers)
    detail = json.loads(body)["detail"]
    assert "cost 5 exceeds the capacity 3" in detail, detail
    assert "retry after" not in detail.lower(), detail


def test_wsgi() -> None:
    from freqguard.integrations.wsgi import FreqGuardMiddleware, Limit

    def page(environ: object, start: Any) -> list[bytes]:
        start("200 OK", [("Content-Type", "text/plain")])
        return [b"page"]

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    limit = Limit("/r", _policy(), key=lambda request: {"user": "u"}, cost=5)
    app = FreqGuardMiddleware(page, guard=guard, limits=[limit])
    guard.set_limit("p", "r", "3/minute", user="u")
    seen: list[tuple[str, list[tuple[str, str]]]] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/r", "REMOTE_ADDR": "1.2.3.4"}
    body = b"".join(app(environ, lambda status, headers, exc=None: seen.append((status, headers))))
    [(status, headers)] = seen
    _check(int(status[:3]), dict(headers), body)


def test_asgi() -> None:
    from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

    async def page(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    limit = Limit("/r", _policy(), key=lambda request: {"user": "u"}, cost=5)
    app = FreqGuardMiddleware(page, guard=guard, limits=[limit])

    async def run() -> httpx.Response:
        await guard.set_limit("p", "r", "3/minute", user="u")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.get("/r")

    response = asyncio.run(run())
    _check(response.status_code, response.headers, response.content)


def test_flask() -> None:
    from flask import Flask

    from freqguard.integrations.flask import FreqGuard

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    app = Flask(__name__)
    fg = FreqGuard(app, guard=guard)

    @app.get("/r")
    @fg.capped(
        Rule("10/minute", by="user", name="r"), key=lambda request: {"user": "u"}, name="p", cost=5
    )
    def r() -> str:
        return "ok"

    assert app.test_client().get("/r").status_code == 200  # its policy registered
    guard.set_limit("p", "r", "3/minute", user="u")
    response = app.test_client().get("/r")
    _check(response.status_code, response.headers, response.data)


def test_django() -> None:
    import pytest

    pytest.importorskip("django")
    from tests.integrations import django_site

    django_site.setup()
    from django.http import HttpRequest, HttpResponse
    from django.test import RequestFactory, override_settings

    from freqguard.integrations import django as fg_django
    from freqguard.integrations.django import capped

    @capped(
        Rule("10/minute", by="user", name="r"), key=lambda r: {"user": "u"}, name="unfit-d", cost=5
    )
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    with override_settings(FREQGUARD_BACKEND=guard):
        try:
            assert view(RequestFactory().get("/")).status_code == 200
            policy = next(name for name in guard.policies if "unfit-d" in name)
            guard.set_limit(policy, "r", "3/minute", user="u")
            response = view(RequestFactory().get("/"))
        finally:
            fg_django.close()
    _check(response.status_code, response.headers, response.content)


def test_fastapi_enforce() -> None:
    from freqguard.integrations.fastapi import Refused, enforce

    guard = AsyncGuard(MemoryBackend(), [_policy()], clock=ManualClock(START))

    async def run() -> Refused:
        await guard.set_limit("p", "r", "3/minute", user="u")
        try:
            await enforce(guard, "p", 5, user="u")
        except Refused as refused:
            return refused
        raise AssertionError("admitted")

    refused = asyncio.run(run())
    assert "Retry-After" not in (refused.headers or {}), refused.headers
    assert "cost 5 exceeds the capacity 3" in str(refused.detail)


def test_drf_throttle_waits_none() -> None:
    import pytest

    pytest.importorskip("rest_framework")
    from tests.integrations import django_site

    django_site.setup()
    from django.test import override_settings
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.test import APIRequestFactory
    from rest_framework.views import APIView

    from freqguard.integrations import django as fg_django
    from freqguard.integrations.drf import FreqGuardThrottle

    class Costly(FreqGuardThrottle):
        rate = "10/minute"
        cost = 5

    class View(APIView):
        throttle_classes = (Costly,)

        def get(self, request: Request) -> Response:
            return Response("ok")

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    with override_settings(FREQGUARD_BACKEND=guard):
        try:
            assert View.as_view()(APIRequestFactory().get("/")).status_code == 200
            [name] = guard.policies
            [rule] = guard.policies[name].rules
            assert rule.by == ("ident",)  # user_or_ip's: "ip:<address>" for the anonymous
            guard.set_limit(name, rule.id, "3/minute", ident="ip:127.0.0.1")
            response = View.as_view()(APIRequestFactory().get("/"))
        finally:
            fg_django.close()
    assert response.status_code == 429
    assert "Retry-After" not in response, dict(response.items())
