"""The calls under ``/v1/policies`` reach their handlers through :class:`Calls`, past
Starlette's router: every request, hostile or not, gets the answer Starlette's own routing
gives (status, body, headers) and leaves the same store behind. Two services, one with
``Calls`` and one without, each on its own memory store at the same pinned time, take
the same requests."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from starlette.routing import Route

from freqguard import AsyncGuard, ManualClock, MemoryBackend
from freqguard.service import create_app
from freqguard.service.dispatch import Calls
from tests.conftest import examples
from tests.integrations.test_service_hostile import DAILY, REQUESTS, SMS, TOKEN, _state


def _answer(answer: httpx.Response) -> tuple[Any, ...]:
    """Status, every header (in order; the ASGI transport adds none) and body."""
    return answer.status_code, answer.headers.multi_items(), answer.content


async def _served(requests: list[tuple[str, str, bytes, dict[str, str]]], bare: bool) -> Any:
    guard = AsyncGuard(MemoryBackend(), [SMS, DAILY], clock=ManualClock(1_700_000_000))
    app = create_app(guard, [TOKEN])
    assert isinstance(app, Calls)
    transport = httpx.ASGITransport(app=app.app if bare else app, raise_app_exceptions=False)
    answers = []
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        for method, path, body, headers in requests:
            answer = await http.request(method, path, content=body, headers=headers)
            answers.append(_answer(answer))
    return answers, await _state(guard)


@settings(max_examples=examples(50))
@given(requests=REQUESTS)
def test_calls_answer_as_starlette_s_router_does(
    requests: list[tuple[str, str, bytes, dict[str, str]]],
) -> None:
    async def run() -> None:
        assert await _served(requests, bare=False) == await _served(requests, bare=True)

    asyncio.run(run())


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/policies/sms/hit/"),  # a trailing slash: the router redirects
        ("POST", "/v1/policies//hit"),  # no policy
        ("POST", "/v1/policies/sms/limits/rcpt-1m"),  # a rule's route takes PUT and DELETE
        ("PUT", "/v1/policies/sms/limits"),  # and the lookup POST only
        ("GET", "/v1/policies/sms/hit"),
        ("POST", "/v1/policies/sms/limits/"),
        ("POST", "/v1/policies/sms/hit/x/y"),
        ("POST", "/v1/policies/sms"),
    ],
)
def test_what_calls_do_not_find_goes_on_to_the_router(method: str, path: str) -> None:
    requests = [(method, path, b'{"context": {"recipient": "a"}}', _JSON)]

    async def run() -> None:
        served, bare = await _served(requests, bare=False), await _served(requests, bare=True)
        assert served == bare
        assert served[0][0][0] in (307, 404, 405), served

    asyncio.run(run())


_JSON = {"content-type": "application/json", "authorization": f"Bearer {TOKEN}"}


def test_every_call_route_is_found_and_no_other_route_is() -> None:
    guard = AsyncGuard(MemoryBackend(), [SMS, DAILY], clock=ManualClock(1_700_000_000))
    app = create_app(guard, [TOKEN])
    assert isinstance(app, Calls)
    for route in app.routes:
        assert isinstance(route, Route)
        path = route.path.format(policy="sms", rule="rcpt-1m")
        for method in route.methods or ():
            scope = {"type": "http", "path": path, "method": method}
            found = app._find(scope)
            if route.path.startswith("/v1/policies/{policy}/"):
                assert found is not None, (method, path)
                assert found[0] is route.endpoint, (method, path)
            else:
                assert found is None, (method, path)
    mounted = {"type": "http", "path": "/v1/policies/sms/hit", "method": "POST", "root_path": "/x"}
    assert app._find(mounted) is None


@pytest.mark.parametrize("depth", [33, 500, 960, 975, 990, 5000])
def test_a_deep_body_is_refused_alike_at_every_stack_depth(depth: int) -> None:
    """A parser stops where the stack runs out, which differs by route: the service
    refuses a body nested past its bound before parsing it, so both routes answer alike."""
    body = b'{"context": ' + b"[" * depth + b"]" * depth + b"}"
    requests = [("POST", "/v1/policies/sms/hit", body, _JSON)]

    async def run() -> None:
        served, bare = await _served(requests, bare=False), await _served(requests, bare=True)
        assert served == bare
        (status, _, content), *_ = served[0]
        assert status == 422
        assert b"nested too deeply (more than 32 levels)" in content

    asyncio.run(run())


def test_a_call_route_that_is_not_a_bare_async_endpoint_is_refused() -> None:
    """Calls awaits an endpoint as it is: a sync one (Starlette runs it in a thread) or
    one with middleware of its own would lose that, so either is an error at once."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.gzip import GZipMiddleware
    from starlette.responses import Response

    def sync(request: Any) -> Response:
        return Response()

    async def bare(request: Any) -> Response:
        return Response()

    path = "/v1/policies/{policy}/hit"
    for route in (
        Route(path, sync, methods=["POST"]),
        Route(path, bare, methods=["POST"], middleware=[Middleware(GZipMiddleware)]),
    ):
        with pytest.raises(ValueError, match="not a bare async endpoint"):
            Calls(Starlette(routes=[route]), [route])
    assert Calls(Starlette(), [Route(path, bare, methods=["POST"])])._find(
        {"type": "http", "path": "/v1/policies/p/hit", "method": "POST"}
    )
