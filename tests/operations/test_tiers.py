"""Tiers decided in code (``Rule(..., rate_for=..., reads=...)``): the rate of a hit is a
function of its context (the caller's plan), compiled once per distinct rate; on every
backend and side, with ``hit_many``, refunds and per-key limits; in the decorator and every
HTTP integration (Starlette, FastAPI, WSGI, Flask); and every mistake a clear error."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta

import httpx
import pytest
from fastapi import Depends, FastAPI
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from werkzeug.test import Client

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rate,
    Rule,
    TierRates,
    capped,
)
from freqguard.integrations.fastapi import limit_dependency
from freqguard.integrations.flask import FreqGuard
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware
from tests.conftest import AnyGuardFactory

PLANS = {"free": "2/minute", "pro": "4/minute"}
CALLS: list[Mapping[str, str]] = []


def plan_rate(ctx: Mapping[str, str]) -> str | None:
    CALLS.append(dict(ctx))
    return PLANS.get(ctx.get("plan", ""))


def _api() -> Policy:
    return Policy(
        "api",
        Rule("1/minute", by="user", name="per-user", rate_for=plan_rate, reads="plan"),
        Rule("100/minute", name="all"),
    )


def test_each_plan_gets_its_rate_and_no_plan_the_rules_own(
    make_any_guard: AnyGuardFactory,
) -> None:
    guard = make_any_guard([_api()])
    assert [guard.hit("api", user="a", plan="free").allowed for _ in range(3)] == [1, 1, 0]
    assert [guard.hit("api", user="b", plan="pro").allowed for _ in range(5)] == [1] * 4 + [0]
    assert [guard.hit("api", user="c").allowed for _ in range(2)] == [True, False]
    denied = guard.hit("api", user="b", plan="pro")
    assert denied.denied_by[0].rate == Rate(4, timedelta(minutes=1))
    assert denied.denied_by[0].id == "per-user"
    # the same keys whatever the plan: an upgrade keeps the count
    assert [guard.hit("api", user="a", plan="pro").allowed for _ in range(3)] == [1, 1, 0]


def test_each_distinct_rate_is_compiled_once(make_any_guard: AnyGuardFactory) -> None:
    guard = make_any_guard([_api()])
    for i in range(50):
        guard.hit("api", user=f"u{i}", plan=("free", "pro", "none")[i % 3])
    tiers = guard.guard._policies.plan("api")._tiers
    assert tiers is not None
    assert len(tiers._made) == 3  # free, pro, and the rule's own


def test_a_batch_mixes_plans_and_refunds_go_back_to_their_tier(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    guard = make_any_guard([_api()])
    contexts = [{"user": "a", "plan": "free"}] * 3 + [{"user": "b", "plan": "pro"}] * 5
    decisions = guard.hit_many("api", contexts)
    assert [d.allowed for d in decisions] == [1, 1, 0, 1, 1, 1, 1, 0]
    guard.refund(decisions[0])
    assert guard.hit("api", user="a", plan="free").allowed
    assert not guard.hit("api", user="a", plan="free").allowed


def test_a_per_key_limit_beats_the_plan(make_any_guard: AnyGuardFactory) -> None:
    guard = make_any_guard([_api()])
    guard.set_limit("api", "per-user", "3/minute", user="a")
    assert [guard.hit("api", user="a", plan="pro").allowed for _ in range(4)] == [1, 1, 1, 0]
    guard.clear_limit("api", "per-user", user="a")
    assert guard.hit("api", user="a", plan="pro").allowed  # pro's 4th
    assert not guard.hit("api", user="a", plan="pro").allowed
    assert guard.peek("api", user="a", plan="pro").rules[0].rule.rate.limit == 4


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (5, "must return a rate string, a Rate or None"),
        ("often", "often"),
        ("20000/minute", "rate_for returned 20000 per 60 seconds, which it cannot take"),
    ],
)
def test_a_bad_rate_from_the_function_is_a_clear_error(
    make_any_guard: AnyGuardFactory, returned: object, message: str
) -> None:
    policy = Policy("p", Rule("1/minute", by="u", name="r", rate_for=lambda c: returned))  # type: ignore[arg-type,return-value]
    guard = make_any_guard([policy])
    with pytest.raises(ConfigError, match=message):
        guard.hit("p", u="a")


def test_mistakes_are_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match="needs a name"):
        Rule("1/minute", by="u", rate_for=plan_rate)
    with pytest.raises(ConfigError, match="rate_for must be a function"):
        Rule("1/minute", by="u", name="r", rate_for="free")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="read by rate_for only"):
        Rule("1/minute", by="u", name="r", reads="plan")
    with pytest.raises(ConfigError, match="are in by"):
        Rule("1/minute", by=("u", "plan"), name="r", rate_for=plan_rate, reads="plan")
    with pytest.raises(ConfigError, match="both a rule's dimension"):
        Policy(
            "p",
            Rule("1/minute", by="u", name="r", rate_for=plan_rate, reads="plan"),
            Rule("1/minute", by="plan"),
        )
    guard = Guard(policies=[_api()])
    with pytest.raises(ConfigError, match=r"unknown dimension.*plam.*may read: plan"):
        guard.hit("api", user="a", plam="pro")


def test_a_tier_rate_its_rule_cannot_take_is_refused_at_construction() -> None:
    """Not at every hit of that tier: each rate of a table is checked as the rule's own."""
    big = TierRates("plan", {"pro": "100/minute", "big": "20000/second"})
    with pytest.raises(ConfigError, match=r"tier 'big' \(20000 per second\).*at most 10000"):
        Rule("100/minute", by="u", name="r", rate_for=big)
    Rule("100/minute", by="u", name="r", strategy="gcra", rate_for=big)  # a bucket takes it
    slow = TierRates("plan", {"slow": "1 per 3660 days"})
    with pytest.raises(ConfigError, match=r"tier 'slow'.*10 years"):
        Rule("1/second", by="u", name="r", strategy="gcra", burst=10, rate_for=slow)
    wide = TierRates("plan", {"team": "9000/hour"})
    with pytest.raises(ConfigError, match="logs could hold 21000 entries"):
        Policy(
            "p",
            Rule("100/hour", by="u", name="a", rate_for=wide),
            Rule("100/hour", by=("u", "c"), name="b", rate_for=wide),
            Rule("3000/hour", by="c", name="c"),
        )


def test_the_decorator_decides_a_tier_per_call() -> None:
    clock = ManualClock(1_700_000_000)
    guard = Guard(MemoryBackend(), clock=clock)
    rule = Rule("1/minute", by="user", name="send", rate_for=plan_rate, reads="plan")

    @capped(rule, key={"user": "user", "plan": "plan"}, guard=guard, on_exceeded="skip")
    def send(user: str, plan: str) -> str:
        return "sent"

    assert [send("a", "pro") for _ in range(5)] == ["sent"] * 4 + [None]
    assert [send("b", "free") for _ in range(3)] == ["sent"] * 2 + [None]


def _plan_key(request: object) -> dict[str, str]:
    headers = request.headers  # type: ignore[attr-defined]
    return {"user": headers["x-user"], "plan": headers.get("x-plan", "")}


def test_starlette_decides_a_tier_per_request() -> None:
    rule = Rule("1/minute", by="user", name="api", rate_for=plan_rate, reads="plan")
    app = Starlette(routes=[Route("/api", lambda r: PlainTextResponse("ok"))])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1_700_000_000))
    app.add_middleware(
        FreqGuardMiddleware, guard=guard, limits=[Limit("/api", rule, key=_plan_key)]
    )

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            pro = {"x-user": "a", "x-plan": "pro"}
            return [await http.get("/api", headers=pro) for _ in range(5)]

    responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [200] * 4 + [429]
    assert responses[0].headers["ratelimit-policy"] == '"api";q=4;w=60'


def test_flask_decides_a_tier_per_request() -> None:
    app = Flask(__name__)
    app.config["FREQGUARD_BACKEND"] = "memory://"
    fg = FreqGuard(app, key=_plan_key)
    rule = Rule("1/minute", by="user", name="api", rate_for=plan_rate, reads="plan")

    @app.route("/api")
    @fg.capped(rule)
    def api() -> str:
        return "ok"

    client = app.test_client()
    codes = [client.get("/api", headers={"x-user": "a", "x-plan": "free"}).status_code]
    codes += [client.get("/api", headers={"x-user": "a", "x-plan": "free"}).status_code]
    codes += [client.get("/api", headers={"x-user": "a", "x-plan": "free"}).status_code]
    assert codes == [200, 200, 429]


def test_fastapi_dependency_decides_a_tier_per_request() -> None:
    rule = Rule("1/minute", by="user", name="api", rate_for=plan_rate, reads="plan")
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1_700_000_000))
    app = FastAPI()
    limited = limit_dependency(guard, rule, key=_plan_key, name="api")

    @app.get("/api", dependencies=[Depends(limited)])
    async def api() -> dict[str, bool]:
        return {"ok": True}

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            free = {"x-user": "a", "x-plan": "free"}
            return [await http.get("/api", headers=free) for _ in range(3)]

    responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[0].headers["ratelimit-policy"] == '"api";q=2;w=60'


def test_wsgi_middleware_decides_a_tier_per_request() -> None:
    def app(environ: object, start_response: object) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])  # type: ignore[operator]
        return [b"ok"]

    rule = Rule("1/minute", by="user", name="api", rate_for=plan_rate, reads="plan")
    wrapped = WSGIMiddleware(
        app,
        guard=Guard(MemoryBackend(), clock=ManualClock(1_700_000_000)),
        limits=[Limit("/api", rule, key=_plan_key)],
    )
    client = Client(wrapped)
    pro = {"x-user": "a", "x-plan": "pro"}
    codes = [client.get("/api", headers=pro).status_code for _ in range(5)]
    assert codes == [200] * 4 + [429]
    assert client.get("/api", headers={"x-user": "b"}).status_code == 200  # no plan: 1/minute
    assert client.get("/api", headers={"x-user": "b"}).status_code == 429


def test_the_deny_cache_keeps_each_tiers_denial_apart() -> None:
    """A caller denied on the free plan and upgraded is decided at the pro rate at once: the
    deny cache keys a denial by the values the rates are read from too."""
    guard = Guard(MemoryBackend(), [_api()], clock=ManualClock(1_700_000_000), deny_cache=100)
    assert [guard.hit("api", user="a", plan="free").allowed for _ in range(3)] == [1, 1, 0]
    assert guard.hit("api", user="a", plan="pro").allowed  # the 3rd of pro's 4
