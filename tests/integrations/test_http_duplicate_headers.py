"""A header key cannot be rotated by repeating the header.

The application reads one value (Starlette: the first line; WSGI: the one value the server
joined the lines into). A key on a different value (all lines joined) let a client keep a
valid API key and rotate a second line: 20 of 20 requests passed a 5 per 10 s limit.
"""

from __future__ import annotations

import asyncio

import httpx
from fastapi import Depends, FastAPI
from flask import Flask, request
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from werkzeug.test import Client

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend
from freqguard.integrations._http import RequestInfo
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import (
    BadRequest,
    FreqGuardMiddleware,
    Limit,
    header,
    limit_dependency,
)
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware

VALID = "k1"


def _rotating(n: int) -> list[tuple[str, str]]:
    return [("X-API-Key", VALID), ("X-API-Key", f"junk-{n}")]


async def _send(app: object, calls: list[list[tuple[str, str]]]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return [await http.get("/search", headers=headers) for headers in calls]


def test_asgi_middleware_answers_400_to_a_repeated_key_header(clock: ManualClock) -> None:
    served: list[str] = []

    async def search(request: Request) -> PlainTextResponse:
        served.append(request.headers["x-api-key"])  # Starlette reads the first line
        return PlainTextResponse("ok")

    app = FreqGuardMiddleware(
        Starlette(routes=[Route("/search", search)]),
        guard=AsyncGuard(MemoryBackend(), clock=clock),
        limits=[Limit("/search", "5 per 10 seconds", key=header("X-API-Key"))],
    )
    responses = asyncio.run(_send(app, [_rotating(n) for n in range(20)]))
    assert [r.status_code for r in responses] == [400] * 20
    assert served == []
    problem = responses[0].json()
    assert responses[0].headers["content-type"] == "application/problem+json"
    assert problem["status"] == 400
    assert "x-api-key" in problem["detail"].lower()
    # one line is keyed as before, and the valid key still has its whole budget
    codes = [r.status_code for r in asyncio.run(_send(app, [[("X-API-Key", VALID)]] * 6))]
    assert codes == [200] * 5 + [429]


def test_fastapi_dependency_answers_400_to_a_repeated_key_header(clock: ManualClock) -> None:
    guard = AsyncGuard(MemoryBackend(), clock=clock)
    app = FastAPI()
    served: list[str] = []
    limited = limit_dependency(guard, "5 per 10 seconds", key=header("X-API-Key"), name="search")

    @app.get("/search", dependencies=[Depends(limited)])
    async def search(request: Request) -> dict[str, bool]:
        served.append(request.headers["x-api-key"])
        return {"ok": True}

    responses = asyncio.run(_send(app, [_rotating(n) for n in range(20)]))
    assert [r.status_code for r in responses] == [400] * 20
    assert served == []


def test_wsgi_keys_on_the_value_the_application_reads(clock: ManualClock) -> None:
    # WSGI servers join repeated lines into one environ value with commas: that joined
    # value is all any WSGI application can read, so it is the key. It is never the
    # valid key alone, so repeating lines buys no requests as that key.
    app = Flask(__name__)
    admitted: list[str] = []

    @app.get("/search")
    def search() -> tuple[str, int]:
        if request.headers["X-API-Key"] != VALID:
            return "unknown key", 401
        admitted.append(VALID)
        return "ok", 200

    app.wsgi_app = WSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app,
        guard=Guard(MemoryBackend(), clock=clock),
        limits=[Limit("/search", "5 per 10 seconds", key=header("X-API-Key"))],
    )
    client = Client(app)
    codes = [client.get("/search", headers=_rotating(n)).status_code for n in range(20)]
    codes += [client.get("/search", headers=[("X-API-Key", VALID)]).status_code for _ in range(6)]
    assert codes == [401] * 20 + [200] * 5 + [429]
    assert len(admitted) == 5


def test_flask_extension_keys_on_the_value_the_view_reads(clock: ManualClock) -> None:
    app = Flask(__name__)
    fg = FreqGuard(app, guard=Guard(MemoryBackend(), clock=clock))
    admitted: list[str] = []

    @app.get("/search")
    @fg.capped("5 per 10 seconds", key=header("X-API-Key"))
    def search() -> tuple[str, int]:
        if request.headers["X-API-Key"] != VALID:
            return "unknown key", 401
        admitted.append(VALID)
        return "ok", 200

    client = app.test_client()
    codes = [client.get("/search", headers=_rotating(n)).status_code for n in range(20)]
    codes += [client.get("/search", headers=[("X-API-Key", VALID)]).status_code for _ in range(6)]
    assert codes == [401] * 20 + [200] * 5 + [429]
    assert len(admitted) == 5


def test_wsgi_and_flask_answer_400_when_a_key_function_refuses(clock: ManualClock) -> None:
    def refuse(request_info: RequestInfo) -> str:
        raise BadRequest("no usable key")

    app = Flask(__name__)
    fg = FreqGuard(app, guard=Guard(MemoryBackend(), clock=clock))

    @app.get("/view")
    @fg.capped("5/minute", key=refuse)
    def view() -> str:
        return "ran"

    @app.get("/search")
    def search() -> str:
        return "ran"

    app.wsgi_app = WSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app,
        guard=Guard(MemoryBackend(), clock=clock),
        limits=[Limit("/search", "5/minute", key=refuse)],
    )
    client = Client(app)
    for path in ("/view", "/search"):
        response = client.get(path)
        assert response.status_code == 400
        assert response.headers["Content-Type"] == "application/problem+json"
        assert response.json is not None
        assert response.json["detail"] == "no usable key"
