"""An adversarial review of ``headers.merged`` (the ASGI and WSGI middlewares keeping one set
of rate-limit numbers where the app sets some of the same header names itself).

* Both IETF (the default of the middleware and of ``limit_dependency``): the kept
  ``RateLimit-Policy`` was one side's only, so the other limit's quota vanished, where
  ``combined_headers`` lists every enforcing rule (a List field: both are readable).
* The app's own denial (a 429 with ``Retry-After``) whose remaining is more than the
  middleware's (a cost the rule cannot fit): the middleware's allowed numbers replaced the
  refusal's, a 429 saying ``1`` remaining of ``3``; ``combined_headers`` puts a denial first.
* A partial set of the app's (only ``X-RateLimit-Limit``): the middleware's remaining and
  reset were added to the app's limit, ``99`` remaining of ``2``: not one set.
* An IETF ``RateLimit`` of several items: only the first item's ``r`` was read, so the app's
  ``r=2`` lost to the middleware's ``r=3``.
* A remaining ``str.isdigit`` takes but ``int`` does not (``²``, 5000 digits): the
  middleware raised, a 500 for a header the app sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend
from freqguard.headers import merged
from freqguard.integrations import wsgi
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, limit_dependency
from tests.conftest import START


def _get(app: Any, path: str, times: int) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return [await http.get(path) for _ in range(times)]

    return asyncio.run(run())


def _raw_app(headers: list[tuple[bytes, bytes]], status: int = 200) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def test_both_ietf_the_policy_lists_both_limits() -> None:
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    app = FastAPI()
    report_limit = limit_dependency(guard, "2/minute", name="report")

    @app.get("/report", dependencies=[Depends(report_limit)])
    async def report() -> dict[str, str]:
        return {"report": "..."}

    app.add_middleware(
        FreqGuardMiddleware, guard=guard, limits=[Limit("/{rest:path}", "100/minute")]
    )
    [response] = _get(app, "/report", 1)
    assert len(response.headers.get_list("ratelimit")) == 1, response.headers
    assert ";r=1;" in response.headers["ratelimit"]  # the dependency's, nearest exhaustion
    [policy] = response.headers.get_list("ratelimit-policy")  # one line, both quotas
    assert "q=2;" in policy, policy
    assert "q=100;" in policy, policy


def test_an_apps_denial_keeps_its_own_numbers() -> None:
    """The dependency refuses a cost of 5 with 3 left (8/minute); the middleware's 3/minute
    allows with 1 left: the 429's numbers are the refusal's, not ``1`` remaining."""
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    app = FastAPI()
    heavy = limit_dependency(guard, "8/minute", name="heavy", cost=5, headers="x-ratelimit")

    @app.get("/heavy", dependencies=[Depends(heavy)])
    async def route() -> dict[str, str]:
        return {}

    app.add_middleware(
        FreqGuardMiddleware,
        guard=guard,
        limits=[Limit("/{rest:path}", "3/minute")],
        headers="x-ratelimit",
    )
    first, second = _get(app, "/heavy", 2)
    assert first.status_code == 200
    assert second.status_code == 429
    assert second.headers.get_list("retry-after") == [second.headers["retry-after"]]
    assert second.headers.get_list("x-ratelimit-limit") == ["8"], second.headers
    assert second.headers.get_list("x-ratelimit-remaining") == ["3"], second.headers


def test_a_wsgi_apps_partial_set_is_not_completed_with_the_middlewares() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("X-RateLimit-Limit", "2")])
        return [b"ok"]

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    guarded = wsgi.FreqGuardMiddleware(
        app, guard=guard, limits=[Limit("/x", "100/minute")], headers="x-ratelimit"
    )
    with httpx.Client(transport=httpx.WSGITransport(app=guarded), base_url="http://t") as http:
        response = http.get("/x")
    limit = response.headers.get_list("x-ratelimit-limit")
    remaining = response.headers.get_list("x-ratelimit-remaining")
    assert (limit, remaining) in ((["2"], []), (["100"], ["99"])), response.headers


def test_an_ietf_ratelimit_of_several_items_is_read_by_its_nearest() -> None:
    own = [
        (b"ratelimit-policy", b'"a";q=10;w=60, "b";q=4;w=60'),
        (b"ratelimit", b'"a";r=5;t=1, "b";r=2;t=3'),
    ]
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    guarded = FreqGuardMiddleware(_raw_app(own), guard=guard, limits=[Limit("/x", "4/minute")])
    [response] = _get(guarded, "/x", 1)  # the middleware's r=3
    assert response.headers.get_list("ratelimit") == ['"a";r=5;t=1, "b";r=2;t=3']


@pytest.mark.parametrize("value", [b"\xb2", b"9" * 5000])
def test_a_remaining_int_cannot_read_is_no_crash(value: bytes) -> None:
    own = [(b"x-ratelimit-limit", b"100"), (b"x-ratelimit-remaining", value)]
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    guarded = FreqGuardMiddleware(
        _raw_app(own), guard=guard, limits=[Limit("/x", "4/minute")], headers="x-ratelimit"
    )
    [response] = _get(guarded, "/x", 1)
    assert response.status_code == 200
    assert len(response.headers.get_list("x-ratelimit-remaining")) == 1


def test_merged_is_linear_in_the_apps_headers() -> None:
    given = [(f"x-app-{i}", "v") for i in range(50_000)]
    given.append(("X-RateLimit-Remaining", "5"))
    ours = [("X-RateLimit-Limit", "10"), ("X-RateLimit-Remaining", "9")]
    out = merged(given, ours)
    assert [v for k, v in out if k.lower() == "x-ratelimit-remaining"] == ["5"]


def test_an_apps_policy_alone_keeps_the_middlewares_numbers_and_quota() -> None:
    own = [(b"ratelimit-policy", b'"app";q=10;w=60')]
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    guarded = FreqGuardMiddleware(_raw_app(own), guard=guard, limits=[Limit("/x", "4/minute")])
    [response] = _get(guarded, "/x", 1)
    assert [";r=3;" in v for v in response.headers.get_list("ratelimit")] == [True]
    [policy] = response.headers.get_list("ratelimit-policy")
    assert '"app";q=10;w=60' in policy, policy
    assert "q=4;" in policy, policy
