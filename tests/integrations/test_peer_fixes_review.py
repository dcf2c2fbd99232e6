"""An adversarial review of 5c74b51 (a Flask-Limiter and slowapi user's first hour: default
limits that take Rules and refuse at ``init_app`` what would 500, the ASGI middleware's
``refused=`` hook), each finding a failing test. Memory backend, pinned time."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from flask import Flask

from freqguard import AsyncGuard, ConfigError, Decision, Guard, ManualClock, MemoryBackend, Rule
from freqguard.integrations.flask import FreqGuard
from tests.conftest import START


def _ok() -> str:
    return "ok"


# -- Flask: FREQGUARD_DEFAULT_LIMITS given Rules -----------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        Rule("5/minute", by="user"),  # a dimension the default key (remote_address) never gives
        Rule("5/minute", only=["marketing"]),  # priorities: a route's policy has none
    ],
    ids=["by-a-dimension-the-key-lacks", "only-priorities"],
)
def test_a_default_limit_rule_every_request_would_refuse_fails_in_init_app(rule: Rule) -> None:
    """``app.config["FREQGUARD_DEFAULT_LIMITS"] = [Rule("5/minute", by="user")]`` (or a Rule
    with ``only=["marketing"]``), then ``FreqGuard(app, guard=...)``: ``init_app`` accepts
    it, and every request to every route is a 500 (``ConfigError: route 'flask.a': the key
    gives client; rule 'sl.5.60s' takes user (user never given)``, or "rule 'sl.5.60s'
    names priorities ['marketing'] it does not have"), raised in ``before_request`` when
    the route's policy is first built. 5c74b51 says default limits "that take Rules and
    refuse at init_app what would 500" (its CHANGELOG: "a default ... passed init_app ...
    and made every request a 500"), and integrations.md: a default rate "that its rule
    cannot hold, fails in init_app". Expected: a ConfigError from ``init_app``."""
    app = Flask("review")
    app.config["FREQGUARD_DEFAULT_LIMITS"] = [rule]
    app.add_url_rule("/a", "a", _ok)
    with pytest.raises(ConfigError):
        FreqGuard(app, guard=Guard(MemoryBackend(ManualClock(START))))  # now: each request a 500


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


def test_a_refused_hook_that_is_a_plain_function_is_refused_at_construction() -> None:
    """``FreqGuardMiddleware(app, guard=..., limits=[Limit("/a", "1/minute")],
    refused=answer)`` with ``def answer(scope, decision): return JSONResponse(..., 429)``
    (a plain function, as slowapi's ``_rate_limit_exceeded_handler`` is, which the hook
    replaces): accepted (the constructor asks ``callable``; its docstring: "ConfigError:
    ... a refused that is not a function"), and the first denial raises ``TypeError:
    object JSONResponse can't be used in 'await' expression`` inside the middleware: a 500
    at every 429. Expected: refused at construction, naming ``refused=`` and that it must
    be an async function (or the plain function's Response sent)."""
    pytest.importorskip("starlette")
    from starlette.responses import JSONResponse

    from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

    def answer(scope: Any, decision: Decision) -> JSONResponse:
        return JSONResponse({"error": "slow down"}, 429)

    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    try:
        app = FreqGuardMiddleware(
            _inner,
            guard=guard,
            limits=[Limit("/a", "1/minute")],
            refused=answer,
        )
    except ConfigError:
        return  # refused where it is given
    assert [r.status_code for r in _get(app, "/a", 2)] == [200, 429]


def test_a_refused_hooks_own_retry_after_is_not_sent_twice() -> None:
    """A ``refused=`` hook answering ``JSONResponse({...}, 429, headers={"Retry-After":
    "99"})`` (slowapi's handler sets its own headers; integrations.md: "sent with the
    rate-limit headers and Retry-After"): the 429 carries two ``retry-after`` fields,
    ``99`` (the hook's) and ``60`` (the middleware's, appended by ``send_with_headers``),
    which disagree. Retry-After is a singleton field (RFC 9110 10.2.3): a client reads one
    of them, either. Expected: one Retry-After (the hook's, or the decision's in its
    place)."""
    pytest.importorskip("starlette")
    from starlette.responses import JSONResponse

    from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

    async def answer(scope: Any, decision: Decision) -> JSONResponse:
        return JSONResponse({"error": "slow down"}, 429, headers={"Retry-After": "99"})

    app = FreqGuardMiddleware(
        _inner,
        guard=AsyncGuard(MemoryBackend(), clock=ManualClock(START)),
        limits=[Limit("/a", "1/minute")],
        refused=answer,
    )
    refused = _get(app, "/a", 2)[1]
    assert refused.status_code == 429
    assert len(refused.headers.get_list("retry-after")) == 1, refused.headers.raw
