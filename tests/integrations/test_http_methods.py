"""HEAD is limited together with GET, in every integration (a GET limit is no HEAD loophole)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterable
from typing import Any

import httpx
import pytest
from flask import Flask
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from werkzeug.test import Client

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware
from tests.conftest import examples

# three GETs use up the limit; the HEADs after them must be denied, not run the handler
CALLS = ["GET"] * 3 + ["HEAD"] * 10


def _starlette(clock: ManualClock, methods: list[str]) -> tuple[list[int], list[str]]:
    """Status codes of ``methods`` sent in turn to a GET route limited 3/minute on GET, and
    the methods its handler ran for."""
    ran: list[str] = []

    async def page(request: Request) -> PlainTextResponse:
        ran.append(request.method)
        return PlainTextResponse("page")

    app = FreqGuardMiddleware(
        Starlette(routes=[Route("/page", page, methods=["GET"])]),
        guard=AsyncGuard(MemoryBackend(), clock=clock),
        limits=[Limit("/page", "3/minute", methods=["GET"])],
    )

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [(await http.request(m, "/page")).status_code for m in methods]

    return asyncio.run(run()), ran


def test_starlette_head_counts_against_a_get_limit(clock: ManualClock) -> None:
    codes, ran = _starlette(clock, CALLS)
    assert codes == [200] * 3 + [429] * 10
    assert ran == ["GET"] * 3


def test_starlette_head_first_then_get_share_one_counter(clock: ManualClock) -> None:
    codes, _ = _starlette(clock, ["HEAD"] * 3 + ["GET"])
    assert codes == [200] * 3 + [429]


def test_wsgi_head_counts_against_a_get_limit(clock: ManualClock) -> None:
    ran: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        ran.append(environ["REQUEST_METHOD"])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"page"]

    client = Client(
        WSGIMiddleware(
            app,
            guard=Guard(MemoryBackend(), clock=clock),
            limits=[Limit("/page", "3/minute", methods=["GET"])],
        )
    )
    codes = [client.open("/page", method=m).status_code for m in CALLS]
    assert codes == [200] * 3 + [429] * 10
    assert ran == ["GET"] * 3


def test_flask_head_counts_against_a_get_view_cap(clock: ManualClock) -> None:
    app = Flask(__name__)
    fg = FreqGuard(app, guard=Guard(MemoryBackend(), clock=clock))
    ran: list[str] = []

    @app.get("/page")
    @fg.capped("3/minute")
    def page() -> str:
        from flask import request

        ran.append(request.method)
        return "page"

    client = app.test_client()
    codes = [client.open("/page", method=m).status_code for m in CALLS]
    assert codes == [200] * 3 + [429] * 10
    assert ran == ["GET"] * 3


@pytest.mark.parametrize("methods", ["POST", "", [], ["PO ST"], [1], b"POST"])
def test_a_limits_methods_that_match_nothing_or_everything_by_mistake_are_refused(
    methods: object,
) -> None:
    """Found by a new user's first hour: Limit("/sms", "2/minute", methods="POST") took
    the string's letters as methods, so no request matched and the route went uncapped;
    methods=[] capped every method. Each is a ConfigError naming the value, as Django's
    capped(methods=) already was."""
    with pytest.raises(ConfigError, match=r"methods must (be a list of HTTP methods|name at)"):
        Limit("/sms", "2/minute", methods=methods)  # type: ignore[arg-type]


def test_a_limits_methods_may_be_any_iterable_of_names() -> None:
    assert Limit("/sms", "2/minute", methods=(m for m in ["post"])).methods == frozenset({"POST"})


_ANYTHING = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=8),
        st.sampled_from(["GET", "post", "HEAD", "PO ST", "\udcff", ""]),
    ),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=examples(100))
@given(methods=_ANYTHING)
def test_a_limits_methods_are_a_set_of_names_or_a_config_error(methods: object) -> None:
    """Hostile values for methods=: bad types, nested, empty, non-UTF-8 text. Each is a set
    of upper-case method names that matches requests, or a ConfigError naming the value,
    never another exception and never a set no request can match (seen failing first:
    methods=False raised a TypeError)."""
    with contextlib.suppress(ConfigError):
        limit = Limit("/sms", "2/minute", methods=methods)  # type: ignore[arg-type]
        assert limit.methods is None or (
            limit.methods and all(re.fullmatch(r"[A-Z]+(?:[-_][A-Z]+)*", m) for m in limit.methods)
        )
        return
    with pytest.raises(ConfigError, match=r"methods( must|: .* is not an HTTP method)"):
        Limit("/sms", "2/minute", methods=methods)  # type: ignore[arg-type]
