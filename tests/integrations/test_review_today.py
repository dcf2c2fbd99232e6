"""An adversarial review of the day's peer-idiom passes: what they refused that is valid.
IANA-registered extension methods taken for misspellings (``ORDERPATCH`` for ``PATCH``) or
refused for their hyphen (WebDAV's ``VERSION-CONTROL``), and Flask-Limiter's
``RATELIMIT_DEFAULT`` refused as "no freqguard limit at all" in Flask's own application
factory, whose blueprints are imported and capped after ``init_app``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from flask import Blueprint, Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations._methods import check_methods
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

# IANA's HTTP Method Registry: none is a misspelling of a standard method
REGISTERED = [
    "ORDERPATCH",  # RFC 3648: 'did you mean PATCH?'
    "VERSION-CONTROL",  # RFC 3253 (WebDAV versioning): refused for its hyphen
    "BASELINE-CONTROL",
    "UPDATEREDIRECTREF",
    "MKWORKSPACE",
    "CHECKIN",
    "UNCHECKOUT",
]


@pytest.mark.parametrize("method", REGISTERED)
def test_a_registered_extension_method_is_taken(method: str) -> None:
    """The docs promise extension methods are counted as written; a registered one was
    refused as a misspelling (``ORDERPATCH``) or as not a method name (a hyphen, which
    RFC 9110's method token allows)."""
    assert check_methods([method]) == frozenset([method])


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _send(app: Any, method: str, n: int) -> list[int]:
    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [(await http.request(method, "/a")).status_code for _ in range(n)]

    return asyncio.run(run())


@pytest.mark.parametrize("method", ["ORDERPATCH", "VERSION-CONTROL"])
def test_a_registered_extension_method_is_limited(clock: ManualClock, method: str) -> None:
    app = Starlette(routes=[Route("/a", _ok, methods=[method])])
    guard = AsyncGuard(MemoryBackend(), clock=clock)
    ours = FreqGuardMiddleware(app, guard=guard, limits=[Limit("/a", "1/minute", methods=[method])])
    assert _send(ours, method, 2) == [200, 429]


def test_a_misspelling_is_still_refused() -> None:
    with pytest.raises(ConfigError, match=r"'PATHC' is not an HTTP method.*'PATCH'"):
        check_methods(["PATHC"])


def _page() -> str:
    return "ok"


def test_their_default_in_a_factory_capping_after_init_app_is_not_refused(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Flask's own application factory sets extensions up first, then imports and
    registers its blueprints (whose views are capped as they are defined): at init_app no
    view is capped yet. A leftover ``RATELIMIT_DEFAULT`` was refused there as "no
    freqguard limit at all", though the app has one; beside freqguard's limits it is a
    warning, as the docs say."""
    fg = FreqGuard(guard=Guard(MemoryBackend(clock)))
    app = Flask(__name__)
    app.config["RATELIMIT_DEFAULT"] = "100/hour"
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        fg.init_app(app)  # raised ConfigError
        blueprint = Blueprint("api", __name__)
        blueprint.get("/a")(fg.capped("1/minute")(_page))  # `from .api import blueprint`
        app.register_blueprint(blueprint)
        client = app.test_client()
        assert [client.get("/a").status_code for _ in range(2)] == [200, 429]
    assert "RATELIMIT_DEFAULT is Flask-Limiter's setting" in caplog.text


def test_their_default_alone_is_still_refused_by_the_first_request(clock: ManualClock) -> None:
    """No freqguard limit once setup is over (the first request): still refused."""
    fg = FreqGuard(guard=Guard(MemoryBackend(clock)))
    app = Flask(__name__)
    app.config["RATELIMIT_DEFAULT"] = "2/minute"
    app.testing = True  # the first request's error is raised, not answered 500
    try:
        fg.init_app(app)
    except ConfigError:
        return  # refused at init_app: as good
    app.get("/a")(_page)
    with pytest.raises(ConfigError, match=r"RATELIMIT_DEFAULT .*no freqguard limit"):
        app.test_client().get("/a")
