"""A second review from slowapi's side: what an earlier pass found and left. A misspelt
``Limit(methods=...)`` taken (the limit matched no request), and ``limit_dependency``
written as slowapi's ``@limiter.limit`` is, a decorator (a bare ``TypeError``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, ConfigError, Decision, ManualClock, MemoryBackend
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, limit_dependency


def _send(app: Any, method: str, path: str, n: int) -> list[int]:
    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [(await http.request(method, path)).status_code for _ in range(n)]

    return asyncio.run(run())


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


@pytest.mark.parametrize(("typed", "meant"), [("POTS", "POST"), ("DELTE", "DELETE")])
def test_a_misspelt_method_is_refused_where_the_limit_is_made(typed: str, meant: str) -> None:
    """``Limit("/a", "5/minute", methods=["POTS"])`` was taken: it matched no request,
    and the route went uncapped (Django's ``@capped`` refuses it)."""
    with pytest.raises(ConfigError, match=rf"'{typed}' is not an HTTP method.*'{meant}'"):
        Limit("/a", "5/minute", methods=[typed])


def test_an_extension_method_is_still_limited(clock: ManualClock) -> None:
    """A cache's ``PURGE`` is a limit's to count, never a misspelling."""
    app = Starlette(routes=[Route("/a", _ok, methods=["PURGE"])])
    guard = AsyncGuard(MemoryBackend(), clock=clock)
    ours = FreqGuardMiddleware(
        app, guard=guard, limits=[Limit("/a", "1/minute", methods=["PURGE"])]
    )
    assert _send(ours, "PURGE", "/a", 2) == [200, 429]


def test_limit_dependency_as_a_decorator_names_depends(clock: ManualClock) -> None:
    """slowapi's ``@limiter.limit("5/minute")`` decorates the endpoint; written so,
    ``@limit_dependency(guard, "5/minute", name="login")`` raised a bare ``TypeError``
    ("missing 1 required positional argument: 'response'")."""
    guard = AsyncGuard(MemoryBackend(), clock=clock)
    made = limit_dependency(guard, "5/minute", name="login")

    async def login() -> str:
        return "in"

    with pytest.raises(ConfigError, match=r"not a decorator.*Depends\(limit_dependency"):
        made(login)


def test_limit_dependency_still_decides_as_a_dependency(clock: ManualClock) -> None:
    """The control: given to ``Depends``, awaited by FastAPI, its value the decision."""
    guard = AsyncGuard(MemoryBackend(), clock=clock)
    app = FastAPI()
    seen: list[bool] = []
    capped = Depends(limit_dependency(guard, "1/minute", name="a"))

    @app.get("/a")
    async def a(decision: Decision = capped) -> str:
        seen.append(decision.allowed)
        return "ok"

    assert _send(app, "GET", "/a", 2) == [200, 429]
    assert seen == [True]
