"""Every HTTP integration when the store fails: fail open or closed per route, and a 503
problem document (never a bare 500) where the route says "raise"."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import (
    FreqGuardMiddleware,
    Limit,
    Refused,
    enforce,
    limit_dependency,
    refused_handler,
)
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware
from freqguard.script.calls import Reply, ScriptCall


class Down(MemoryBackend):
    """A store that is down: every call fails as a refused connection does."""

    def execute(self, call: ScriptCall) -> Reply:
        raise BackendUnavailable("store down", sent=False) from ConnectionError("refused")

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return [self.execute(call) for call in calls]

    async def aexecute(self, call: ScriptCall) -> Reply:
        return self.execute(call)

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return self.execute_many(calls)


LIMITS = [
    Limit("/open", "5/minute", on_error="allow"),
    Limit("/closed", "5/minute", on_error="deny"),
    Limit("/strict", "5/minute"),  # the guard's: "raise"
]


async def _get(app: Any, paths: Sequence[str]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        return [await http.get(path) for path in paths]


def _ok(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


def test_the_asgi_middleware_fails_open_or_closed_per_route_and_never_500s() -> None:
    routes = [Route(p, _ok) for p in ("/open", "/closed", "/strict")]
    guard = AsyncGuard(Down(ManualClock()))
    app = FreqGuardMiddleware(Starlette(routes=routes), guard=guard, limits=LIMITS)
    opened, closed, strict = asyncio.run(_get(app, ["/open", "/closed", "/strict"]))
    assert opened.status_code == 200
    assert closed.status_code == 429
    assert int(closed.headers["retry-after"]) >= 1
    assert strict.status_code == 503
    assert strict.headers["content-type"] == "application/problem+json"
    assert int(strict.headers["retry-after"]) >= 1
    assert json.loads(strict.content)["title"] == "Service Unavailable"


def test_wsgi_and_flask_answer_503_or_by_on_error() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    wrapped = WSGIMiddleware(app, guard=Guard(Down(ManualClock())), limits=LIMITS)
    with httpx.Client(transport=httpx.WSGITransport(app=wrapped), base_url="http://t") as http:
        codes = [http.get(p).status_code for p in ("/open", "/closed", "/strict")]
    assert codes == [200, 429, 503]

    flask_app = Flask(__name__)
    fg = FreqGuard(guard=Guard(Down(ManualClock())))
    fg.init_app(flask_app)

    @flask_app.get("/x")
    @fg.capped("3/minute")
    def view() -> str:
        return "ok"

    answer = flask_app.test_client().get("/x")
    assert answer.status_code == 503
    assert answer.headers["Content-Type"] == "application/problem+json"

    lenient = Flask("lenient")
    fg_open = FreqGuard(guard=Guard(Down(ManualClock()), on_error="allow"))
    fg_open.init_app(lenient)

    @lenient.get("/y")
    @fg_open.capped("3/minute")
    def open_view() -> str:
        return "ok"

    assert lenient.test_client().get("/y").status_code == 200  # the guard fails open


def test_fastapi_dependency_and_enforce_answer_503_through_the_handler() -> None:
    guard = AsyncGuard(Down(ManualClock()), [Policy("api", Rule("5/minute", by="user"))])
    app = FastAPI(exception_handlers={Refused: refused_handler})
    dependency = limit_dependency(guard, "5/minute", name="dep")
    lenient = limit_dependency(guard, "5/minute", name="lenient", on_error="allow")

    @app.get("/dep", dependencies=[Depends(dependency)])
    async def dep() -> str:
        return "ok"

    @app.get("/lenient", dependencies=[Depends(lenient)])
    async def open_route() -> str:
        return "ok"

    @app.get("/enforced")
    async def enforced() -> str:
        await enforce(guard, "api", user="u")
        return "ok"

    dep_r, lenient_r, enforced_r = asyncio.run(_get(app, ["/dep", "/lenient", "/enforced"]))
    assert dep_r.status_code == 503
    assert lenient_r.status_code == 200
    assert enforced_r.status_code == 503
    assert enforced_r.headers["content-type"] == "application/problem+json"


def test_on_error_on_a_limit_of_a_policy_is_refused() -> None:
    with pytest.raises(ConfigError, match="goes on the Policy"):
        Limit("/x", Policy("p", Rule("1/second")), on_error="allow")
    with pytest.raises(ConfigError, match="on_error must be"):
        Limit("/x", "1/second", on_error="open")
