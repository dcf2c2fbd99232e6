"""One request-decision path: routes compiled once, the same 429 from every integration.

The ASGI middleware used to build the route's policy and call ``add_policy`` on every
request (and cache the policy on the user's ``Limit``); the FastAPI dependency answered 429
with FastAPI's ``{"detail": ...}`` JSON instead of the middleware's problem document.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from werkzeug.test import Client

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations._http import RequestInfo
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import (
    BadRequest,
    FreqGuardMiddleware,
    Limit,
    Refused,
    enforce,
    limit_dependency,
    refused_handler,
)
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware


class CountingGuard(Guard):
    added = 0

    def add_policy(self, policy: Policy, *, replace: bool = False) -> None:
        self.added += 1
        super().add_policy(policy, replace=replace)


class CountingAsyncGuard(AsyncGuard):
    added = 0

    def add_policy(self, policy: Policy, *, replace: bool = False) -> None:
        self.added += 1
        super().add_policy(policy, replace=replace)


async def _page(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _get(app: object, path: str, times: int) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [await http.get(path) for _ in range(times)]

    return asyncio.run(run())


def test_asgi_middleware_registers_each_policy_once(clock: ManualClock) -> None:
    guard = CountingAsyncGuard(MemoryBackend(), clock=clock)
    limits = [Limit("/page", "100/minute"), Limit("/other", "100/minute")]
    app = FreqGuardMiddleware(
        Starlette(routes=[Route("/page", _page), Route("/other", _page)]),
        guard=guard,
        limits=limits,
    )
    assert all(r.status_code == 200 for r in _get(app, "/page", 20))
    assert all(r.status_code == 200 for r in _get(app, "/other", 20))
    assert guard.added <= 2  # once per route, not once per request
    assert set(guard.policies) == {limits[0].name, limits[1].name}


def test_wsgi_middleware_and_flask_register_each_policy_once(clock: ManualClock) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    guard = CountingGuard(MemoryBackend(), clock=clock)
    client = Client(WSGIMiddleware(app, guard=guard, limits=[Limit("/page", "100/minute")]))
    assert all(client.get("/page").status_code == 200 for _ in range(20))
    assert guard.added <= 1

    flask_guard = CountingGuard(MemoryBackend(), clock=clock)
    flask_app = Flask(__name__)
    flask_app.config["FREQGUARD_DEFAULT_LIMITS"] = "100/minute"
    fg = FreqGuard(flask_app, guard=flask_guard)

    @flask_app.get("/page")
    @fg.capped("50/minute")
    def page() -> str:
        return "ok"

    http = flask_app.test_client()
    assert all(http.get("/page").status_code == 200 for _ in range(20))
    assert flask_guard.added <= 1


def test_limits_are_immutable_and_untouched_by_requests(clock: ManualClock) -> None:
    limit = Limit("/page", "100/minute")
    before = {name: getattr(limit, name) for name in ("path", "methods", "key", "cost", "name")}
    app = FreqGuardMiddleware(
        Starlette(routes=[Route("/page", _page)]),
        guard=AsyncGuard(MemoryBackend(), clock=clock),
        limits=[limit],
    )
    _get(app, "/page", 3)
    assert {name: getattr(limit, name) for name in before} == before
    with pytest.raises(AttributeError):
        limit.name = "other"


def _fastapi(guard: AsyncGuard) -> FastAPI:
    app = FastAPI(exception_handlers={Refused: refused_handler})
    limited = limit_dependency(guard, "2/minute", name="page")

    @app.get("/page", dependencies=[Depends(limited)])
    async def page() -> str:
        return "ok"

    return app


def test_fastapi_dependency_429_is_the_middlewares_429(clock: ManualClock) -> None:
    middleware = FreqGuardMiddleware(
        Starlette(routes=[Route("/page", _page)]),
        guard=AsyncGuard(MemoryBackend(), clock=clock),
        limits=[Limit("/page", "2/minute", name="page")],
    )
    by_middleware = _get(middleware, "/page", 3)
    by_dependency = _get(_fastapi(AsyncGuard(MemoryBackend(), clock=clock)), "/page", 3)
    assert [r.status_code for r in by_dependency] == [200, 200, 429]
    assert [r.status_code for r in by_middleware] == [200, 200, 429]
    ours, theirs = by_dependency[2], by_middleware[2]
    assert ours.headers["content-type"] == "application/problem+json"
    assert json.loads(ours.content) == json.loads(theirs.content)
    names = ("retry-after", "ratelimit", "ratelimit-policy", "content-type", "content-length")
    assert {n: ours.headers.get(n) for n in names} == {n: theirs.headers.get(n) for n in names}
    # allowed responses carry the same rate-limit headers too
    for name in ("ratelimit", "ratelimit-policy"):
        assert by_dependency[0].headers[name] == by_middleware[0].headers[name]


def test_without_the_handler_fastapi_answers_the_status_and_headers(clock: ManualClock) -> None:
    app = FastAPI()
    guard = AsyncGuard(MemoryBackend(), clock=clock)

    @app.get("/page", dependencies=[Depends(limit_dependency(guard, "1/minute", name="p"))])
    async def page() -> str:
        return "ok"

    denied = _get(app, "/page", 2)[1]
    assert denied.status_code == 429
    assert denied.json() == {"detail": "Rate limit exceeded; retry after 60 seconds."}
    assert denied.headers["retry-after"] == "60"
    assert "ratelimit" in denied.headers


def test_enforce_raises_refused_with_a_problem_document(clock: ManualClock) -> None:
    guard = AsyncGuard(MemoryBackend(), clock=clock)
    guard.add_policy(Policy("reads", Rule("1/minute", by="user")))

    async def twice() -> None:
        await enforce(guard, "reads", user=1)
        await enforce(guard, "reads", user=1)

    with pytest.raises(Refused) as caught:
        asyncio.run(twice())
    assert caught.value.status_code == 429
    problem = json.loads(caught.value.answer.body)
    assert problem["status"] == 429
    assert "instance" not in problem  # enforce does not see the request
    assert problem["violated_policies"] == ["sl.1.60s"]


def test_a_key_refusal_is_a_problem_400_under_the_handler(clock: ManualClock) -> None:
    def refuse(request: RequestInfo) -> str:
        raise BadRequest("no usable key")

    app = FastAPI(exception_handlers={Refused: refused_handler})
    limited = limit_dependency(
        AsyncGuard(MemoryBackend(), clock=clock), "5/minute", key=refuse, name="p"
    )

    @app.get("/page", dependencies=[Depends(limited)])
    async def page() -> str:
        return "ok"

    response = _get(app, "/page", 1)[0]
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == "no usable key"


def test_a_dependency_of_a_concurrency_rule_is_refused_when_made() -> None:
    """A dependency runs before the endpoint and holds nothing while it runs: a concurrency
    rule there failed every request (a 500) instead of the dependency's making (a new
    user's first hour). Refused naming the middleware, which holds the lease."""
    from freqguard import ConfigError

    guard = AsyncGuard(MemoryBackend())
    with pytest.raises(ConfigError, match="FreqGuardMiddleware"):
        limit_dependency(guard, Rule("1 concurrent", lease=30), name="conc")
    with pytest.raises(ConfigError, match="FreqGuardMiddleware"):
        limit_dependency(guard, ["5/minute", Rule("2 concurrent", lease=30)], name="both")
