"""``header(name, missing=...)``: what a request without the key header gets is a choice
made on purpose: refused (the default), one shared budget, uncapped, or keyed by another
key function; on Starlette, Flask and any WSGI app."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from werkzeug.test import Client

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, client_ip, header
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware

KEY = "X-API-Key"


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _starlette(missing: object) -> list[httpx.Response]:
    """Two requests without the key from one peer, one from another, two with a key."""
    app = Starlette(routes=[Route("/search", _ok)])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1000))
    key = header(KEY, missing=missing)  # type: ignore[arg-type]
    limited = FreqGuardMiddleware(app, guard=guard, limits=[Limit("/search", "1/minute", key=key)])

    async def run() -> list[httpx.Response]:
        out = []
        for peer in ("10.0.0.1", "10.0.0.1", "10.0.0.2"):  # no key header
            transport = httpx.ASGITransport(app=limited, client=(peer, 1234))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                out.append(await http.get("/search"))
        transport = httpx.ASGITransport(app=limited)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            out += [await http.get("/search", headers={KEY: "k1"}) for _ in range(2)]
        return out

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("missing", "codes"),
    [
        ("deny", [400, 400, 400, 200, 429]),
        ("share", [200, 429, 429, 200, 429]),  # every anonymous peer on one budget
        ("skip", [200, 200, 200, 200, 429]),
        (client_ip(), [200, 429, 200, 200, 429]),  # each anonymous peer its own
    ],
    ids=["deny", "share", "skip", "client_ip"],
)
def test_starlette(missing: object, codes: list[int]) -> None:
    responses = _starlette(missing)
    assert [r.status_code for r in responses] == codes
    if missing == "deny":
        assert "header 'X-API-Key' is required here" in responses[0].json()["detail"]
    if missing == "skip":
        assert "ratelimit" not in responses[0].headers  # an uncapped request: no headers


def test_the_default_is_to_refuse() -> None:
    app = Starlette(routes=[Route("/search", _ok)])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1000))
    limits = [Limit("/search", "1/minute", key=header(KEY))]
    limited = FreqGuardMiddleware(app, guard=guard, limits=limits)

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=limited)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            out = [await http.get("/search") for _ in range(2)]
            out += [await http.get("/search", headers={KEY: "k1"}) for _ in range(2)]
            return [r.status_code for r in out]

    assert asyncio.run(run()) == [400, 400, 200, 429]


def test_flask_and_wsgi() -> None:
    app = Flask(__name__)
    fg = FreqGuard(app, guard=Guard(MemoryBackend(), clock=ManualClock(1000)))

    @app.route("/a")
    @fg.capped("1/minute", key=header(KEY, missing="skip"))
    def a() -> str:
        return "ok"

    @app.route("/b")
    @fg.capped("1/minute", key=header(KEY))
    def b() -> str:
        return "ok"

    client = app.test_client()
    assert [client.get("/a").status_code for _ in range(3)] == [200, 200, 200]
    assert [client.get("/a", headers={KEY: "k"}).status_code for _ in range(2)] == [200, 429]
    assert client.get("/b").status_code == 400

    def plain(environ: object, start_response: object) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])  # type: ignore[operator]
        return [b"ok"]

    wsgi = WSGIMiddleware(
        plain,
        guard=Guard(MemoryBackend(), clock=ManualClock(1000)),
        limits=[Limit("/", "1/minute", key=header(KEY, missing="share"))],
    )
    http = Client(wsgi)
    assert [http.get("/").status_code for _ in range(2)] == [200, 429]


def test_a_bad_choice_is_refused() -> None:
    with pytest.raises(ConfigError, match="takes 'deny', 'share', 'skip' or a key function"):
        header(KEY, missing="allow")


def test_a_key_function_that_gives_none_is_a_400_and_a_warning_naming_the_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A key function of one's own that answers None for a dimension (the header absent)
    was a 500 naming the route's internal policy (found by a new user's first hour): it is
    the request that lacks the value, so a 400 names the dimension, and the log tells the
    developer, once, which key function and what chooses otherwise."""
    app = Starlette(routes=[Route("/z", _ok)])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1000))

    def by_user(request: object) -> dict[str, object]:
        return {"user": getattr(request, "headers", {}).get("x-user")}

    limited = FreqGuardMiddleware(app, guard=guard, limits=[Limit("/z", "1/minute", key=by_user)])

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=limited)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            out = [await http.get("/z") for _ in range(2)]
            return out + [await http.get("/z", headers={"X-User": "u"}) for _ in range(2)]

    with caplog.at_level("WARNING", logger="freqguard"):
        responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [400, 400, 200, 429]
    assert "no value for 'user'" in responses[0].json()["detail"]
    warned = [r.getMessage() for r in caplog.records if "by_user" in r.getMessage()]
    assert len(warned) == 1
    assert "header(" in warned[0]


def test_an_unhashable_key_function_that_gives_none_is_a_400_not_a_500() -> None:
    """Review: a key function that is a (non-frozen) dataclass instance is unhashable, and
    the once-a-key-function warning looked it up in a set: a TypeError, so a 500, where
    the same function answering a value is served."""
    from dataclasses import dataclass

    @dataclass
    class ByHeader:
        name: str

        def __call__(self, request: object) -> dict[str, object]:
            return {"user": getattr(request, "headers", {}).get(self.name)}

    app = Starlette(routes=[Route("/z", _ok)])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1000))
    limit = Limit("/z", "1/minute", key=ByHeader("x-user"))
    limited = FreqGuardMiddleware(app, guard=guard, limits=[limit])

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=limited, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return [(await http.get("/z", headers=h)).status_code for h in ({"X-User": "u"}, {})]

    assert asyncio.run(run()) == [200, 400]
