"""docs/coming-from/slowapi.md's rows, row by row: slowapi beside freqguard's
Starlette middleware, on one pinned clock (limits' memory storage, which slowapi uses,
reads ``time.time``, patched here), the outcomes equal or different as the page says."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import httpx
import limits.storage.memory
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, ManualClock, MemoryBackend
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

START = 1_700_000_000.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    manual = ManualClock(START)
    monkeypatch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=manual.now))
    return manual


def _get(app: Any, *paths: str) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [await http.get(path) for path in paths]

    return asyncio.run(run())


PATHS = ("/a", "/b", "/free")
ITEMS = "/items/{item_id}"  # a route with a path parameter


def _slowapi_app(decorate: dict[str, Any]) -> Starlette:
    # in the dev extra, not in all,test (the CI matrix's Python jobs install those)
    pytest.importorskip("slowapi", reason="slowapi is not installed: the row needs both sides")
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    limiter = Limiter(key_func=get_remote_address)

    def route(path: str) -> Route:
        async def endpoint(request: Request) -> PlainTextResponse:
            return PlainTextResponse("ok")

        endpoint.__name__ = f"endpoint_{path.strip('/').replace('/', '_').strip('{}')}"
        wrap = decorate.get(path)
        return Route(path, wrap(limiter)(endpoint) if wrap else endpoint)

    app = Starlette(routes=[route(p) for p in (*PATHS, ITEMS)])
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]
    return app


def _ours(clock: ManualClock, limits_given: list[Limit]) -> Any:
    async def endpoint(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route(p, endpoint) for p in (*PATHS, ITEMS)])
    guard = AsyncGuard(MemoryBackend(), clock=clock)
    return FreqGuardMiddleware(app, guard=guard, limits=limits_given)


def test_slowapi_route_limit(clock: ManualClock) -> None:
    theirs = _get(_slowapi_app({"/a": lambda lim: lim.limit("2/minute")}), *["/a"] * 3, "/free")
    ours = _get(_ours(clock, [Limit("/a", "2/minute")]), *["/a"] * 3, "/free")
    assert [r.status_code for r in theirs] == [r.status_code for r in ours] == [200, 200, 429, 200]
    assert theirs[2].json() == {"error": "Rate limit exceeded: 2 per 1 minute"}
    assert ours[2].headers["content-type"] == "application/problem+json"
    assert ours[2].headers["retry-after"] == "60"


def test_slowapi_a_route_with_path_parameters(clock: ManualClock) -> None:
    """slowapi keys a route's limit by the URL as requested (its ``key_style="url"``):
    each item its own budget; a ``Limit`` on the pattern is one budget for the route, and
    keyed by the parameter too, slowapi's (a new-user run found the row missing)."""
    paths = ("/items/1", "/items/2", "/items/3", "/items/1", "/items/1")
    theirs = _get(_slowapi_app({ITEMS: lambda lim: lim.limit("2/minute")}), *paths)
    route = _get(_ours(clock, [Limit(ITEMS, "2/minute")]), *paths)
    each = Limit(
        ITEMS,
        "2/minute",
        key=lambda request: {"client": request.client, "item": request.path_params["item_id"]},
    )
    per_item = _get(_ours(clock, [each]), *paths)
    # each item its own budget of 2, spent by /items/1's third request
    expected = [200, 200, 200, 200, 429]
    assert [r.status_code for r in theirs] == [r.status_code for r in per_item] == expected
    assert [r.status_code for r in route] == [200, 200, 429, 429, 429]


def test_slowapi_default_limits(clock: ManualClock) -> None:
    """slowapi's ``default_limits`` (with its middleware) give each URL its own budget (its
    ``key_style="url"``: ``/items/1`` and ``/items/2`` apart, as the path-keyed catch-all
    does); a catch-all ``Limit`` is one budget for every route, unless keyed by the path too
    (a new user's port gave all routes one budget)."""
    pytest.importorskip("slowapi", reason="slowapi is not installed: the row needs both sides")
    from slowapi import Limiter
    from slowapi.middleware import SlowAPIMiddleware
    from slowapi.util import get_remote_address

    theirs = _slowapi_app({})
    theirs.state.limiter = Limiter(key_func=get_remote_address, default_limits=["2/minute"])
    theirs.add_middleware(SlowAPIMiddleware)
    paths = ("/a", "/a", "/b", "/b", "/a", "/items/1", "/items/2", "/items/1", "/items/1")
    each = Limit(
        "/{rest:path}",
        "2/minute",
        key=lambda request: {"client": request.client, "path": request.path},
    )
    per_path = _get(_ours(clock, [each]), *paths)
    one = _get(_ours(clock, [Limit("/{rest:path}", "2/minute")]), *paths)
    expected = [200, 200, 200, 200, 429, 200, 200, 200, 429]
    assert [r.status_code for r in _get(theirs, *paths)] == expected
    assert [r.status_code for r in per_path] == expected
    assert [r.status_code for r in one] == [200, 200] + [429] * 7


def test_slowapi_shared_limit(clock: ManualClock) -> None:
    shared = {p: (lambda lim: lim.shared_limit("2/minute", scope="s")) for p in ("/a", "/b")}
    theirs = _get(_slowapi_app(shared), "/a", "/b", "/a")
    ours = _get(
        _ours(clock, [Limit(p, "2/minute", name="s") for p in ("/a", "/b")]), "/a", "/b", "/a"
    )
    assert [r.status_code for r in theirs] == [r.status_code for r in ours] == [200, 200, 429]


def test_a_window_edge(clock: ManualClock) -> None:
    """slowapi's fixed window starts at a key's first request: one then, one 58 s later, and
    two at 60.5 s, in its next window: it admits all four, three in the minute ending then;
    the sliding log admits the first of the two."""
    theirs_app = _slowapi_app({"/a": lambda lim: lim.limit("2/minute")})
    ours_app = _ours(clock, [Limit("/a", "2/minute")])
    codes: dict[str, list[int]] = {"theirs": [], "ours": []}
    for offset, times in ((0, 1), (58, 1), (60.5, 2)):
        clock.set(START + offset)
        codes["theirs"] += [r.status_code for r in _get(theirs_app, *["/a"] * times)]
        codes["ours"] += [r.status_code for r in _get(ours_app, *["/a"] * times)]
    assert codes == {"theirs": [200, 200, 200, 200], "ours": [200, 200, 200, 429]}


def test_slowapi_cost(clock: ManualClock) -> None:
    """``@limiter.limit("5/minute", cost=2)``: each request takes two; ``Limit(..., cost=2)``
    the same. A callable cost (slowapi's ``cost=lambda request: ...``) is refused here when
    the ``Limit`` is made (a cost is the route's)."""
    theirs = _get(_slowapi_app({"/a": lambda lim: lim.limit("5/minute", cost=2)}), *["/a"] * 3)
    ours = _get(_ours(clock, [Limit("/a", "5/minute", cost=2)]), *["/a"] * 3)
    assert [r.status_code for r in theirs] == [r.status_code for r in ours] == [200, 200, 429]
    with pytest.raises((TypeError, ValueError)):
        Limit("/a", "5/minute", cost=lambda request: 2)  # type: ignore[arg-type]


def test_slowapi_exempt(clock: ManualClock) -> None:
    """``@limiter.exempt`` under ``default_limits``: that route uncapped, the others
    capped. Here a path no ``Limit`` matches is uncapped; under a catch-all, a key function
    that raises ``SkipRequest`` for the path leaves it out."""
    pytest.importorskip("slowapi", reason="slowapi is not installed: the row needs both sides")
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIMiddleware
    from slowapi.util import get_remote_address

    from freqguard.integrations.starlette import SkipRequest

    limiter = Limiter(key_func=get_remote_address, default_limits=["2/minute"])

    async def endpoint(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def free(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    exempted = limiter.exempt(free)  # type: ignore[no-untyped-call]
    theirs = Starlette(routes=[Route("/a", endpoint), Route("/free", exempted)])
    theirs.state.limiter = limiter
    theirs.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]
    theirs.add_middleware(SlowAPIMiddleware)

    def key(request: Any) -> dict[str, object]:
        if request.path == "/free":
            raise SkipRequest
        return {"client": request.client, "path": request.path}

    ours = _ours(clock, [Limit("/{rest:path}", "2/minute", key=key)])
    paths = ("/free", "/free", "/free", "/a", "/a", "/a")
    expected = [200, 200, 200, 200, 200, 429]
    assert [r.status_code for r in _get(theirs, *paths)] == expected
    assert [r.status_code for r in _get(ours, *paths)] == expected
