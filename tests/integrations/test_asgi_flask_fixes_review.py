"""An adversarial review of the Flask and ASGI parts of 5c74b51 and 92ec053 (Flask's
``FREQGUARD_DEFAULT_LIMITS`` taking Rules, checked at ``init_app``; the ASGI middleware's
``refused=``). Each test fails on those commits for the reason its docstring gives. Memory
backend, pinned time."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from flask import Flask

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend, Rule
from freqguard.integrations.flask import FreqGuard
from tests.conftest import START


def _ok() -> str:
    return "ok"


# -- Flask: FREQGUARD_DEFAULT_LIMITS given Rules -----------------------------------------------


def test_a_default_rule_beside_a_views_cap_of_the_same_rate_is_not_a_500() -> None:
    """``FREQGUARD_DEFAULT_LIMITS = [Rule("10/minute", by="client")]`` (the Rules 5c74b51
    lets the default limits take; 92ec053 checks them "at init_app" so that what would 500
    is refused there) and a view ``@fg.capped("10/minute")``: ``init_app`` accepts both, and
    every request to the view is a 500 (``ConfigError: policy 'flask.b' has two rules
    with the id 'sl.10.60s'``). A default rate is renamed into the route's policy
    (``default.sl.10.60s``), a default Rule is not, so it clashes with the view's rule of
    the same rate; the same default written as a string, ``"10/minute"``, serves the view
    (shown). Expected: the view answered (200), as with the string, or the clash refused
    at ``init_app``."""
    answers = []
    for default in ("10/minute", [Rule("10/minute", by="client")]):
        fg = FreqGuard(guard=Guard(MemoryBackend(ManualClock(START))))
        app = Flask("review")
        app.config["FREQGUARD_DEFAULT_LIMITS"] = default
        app.add_url_rule("/b", "b", fg.capped("10/minute")(_ok))
        try:
            fg.init_app(app)
        except ConfigError:
            answers.append("refused at init_app")
            continue
        answers.append(str(app.test_client().get("/b").status_code))
    assert answers[0] == "200"
    assert answers[1] in ("200", "refused at init_app"), answers


# -- ASGI: FreqGuardMiddleware(refused=...) ---------------------------------------------------


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    from starlette.responses import PlainTextResponse

    await PlainTextResponse("ok")(scope, receive, send)


def _get(app: Any, path: str, times: int) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [await http.get(path) for _ in range(times)]

    return asyncio.run(run())


def test_a_response_given_as_refused_is_refused_at_construction() -> None:
    """``FreqGuardMiddleware(app, ..., refused=JSONResponse({"error": "slow down"}, 429))``:
    the answer itself given where a function of ``(scope, decision)`` returning it is
    asked (a Starlette Response is an ASGI app, so callable). The constructor's check is
    ``callable(refused)`` (its docstring: "ConfigError: ... a ``refused`` that is not a
    function"), so it is accepted, and every denial then calls
    ``Response.__call__(scope, decision)``: ``TypeError: Response.__call__() missing 1
    required positional argument: 'send'``, a 500 at every 429. Expected: refused at
    construction, naming ``refused=`` (or the Response sent as the refusal)."""
    pytest.importorskip("starlette")
    from starlette.responses import JSONResponse

    from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

    try:
        app = FreqGuardMiddleware(
            _inner,
            guard=AsyncGuard(MemoryBackend(), clock=ManualClock(START)),
            limits=[Limit("/a", "1/minute")],
            refused=JSONResponse({"error": "slow down"}, 429),  # type: ignore[arg-type]
        )
    except ConfigError as error:
        said = str(error)
    else:
        said = ""
        assert [r.status_code for r in _get(app, "/a", 2)] == [200, 429]
    assert not said or "refused" in said, said  # refused where it is given, named
