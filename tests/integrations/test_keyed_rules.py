"""A Rule in an HTTP route is keyed by the route's key, as a rate string is: one budget per
key (``Limit("/llm", rule=Rule("4 concurrent", lease=120), key=client_ip())``, a Django
``@capped(Rule(...))``), never a request that fails on dimensions nobody gave; a Rule keyed
by a dimension the key does not give is refused when the route is made."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend, Rule
from freqguard.integrations import django as fg_django
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, client_ip, header
from tests.integrations import django_site  # noqa: F401 -- configures Django


def _app(limit: Limit, gate: asyncio.Event | None = None) -> Any:
    async def llm(request: Request) -> PlainTextResponse:
        if gate is not None:
            await gate.wait()
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/llm", llm)])
    guard = AsyncGuard(clock=ManualClock(1_000))
    app.add_middleware(FreqGuardMiddleware, guard=guard, limits=[limit])
    return app


async def _codes(app: Any, users: list[str]) -> list[int]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return [(await client.get("/llm", headers={"x-user": u})).status_code for u in users]


def test_a_rate_rule_without_by_is_one_budget_per_key() -> None:
    app = _app(Limit("/llm", rule=Rule("2/minute"), key=header("x-user")))
    assert asyncio.run(_codes(app, ["a", "a", "a", "b", "b"])) == [200, 200, 429, 200, 200]


def test_a_concurrency_rule_without_by_is_one_budget_per_key_as_the_docs_show() -> None:
    gate = asyncio.Event()
    limit = Limit("/llm", rule=Rule("1 concurrent", lease=120), key=header("x-user"))
    app = _app(limit, gate)

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            users = ["a", "a", "b"]
            tasks = [asyncio.create_task(client.get("/llm", headers={"x-user": u})) for u in users]
            for _ in range(200):  # bounded: until the refused one is answered
                await asyncio.sleep(0)
                if sum(task.done() for task in tasks) == 1:
                    break
            gate.set()
            return [r.status_code for r in await asyncio.gather(*tasks)]

    assert asyncio.run(main()) == [200, 429, 200]


def test_the_documented_client_ip_example_serves_each_client() -> None:
    app = _app(Limit("/llm", rule=Rule("4 concurrent", lease=120), key=client_ip()))
    assert asyncio.run(_codes(app, ["a", "b"])) == [200, 200]


@pytest.mark.parametrize(
    ("rule", "key", "named"),
    [
        (Rule("5/minute", by="user"), client_ip(), "the key gives client"),
        (
            Rule("5/minute", by=("client", "user")),
            client_ip(),
            "rule 'sl.5.60s' takes client, user",
        ),
        (Rule("1 concurrent", by="plan", lease=9), header("x-user"), "the key gives x_user"),
    ],
)
def test_a_rule_keyed_by_what_the_key_does_not_give_is_refused_when_made(
    rule: Rule, key: Any, named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        Limit("/llm", rule=rule, key=key)


def test_a_rule_keyed_by_what_a_key_function_does_not_give_fails_naming_both() -> None:
    """A key function of the user's own says its dimensions only when called: the first
    request that shows the mismatch is refused with a ConfigError naming both sides."""
    limit = Limit("/llm", rule=Rule("5/minute", by="user"), key=lambda request: {"ip": "x"})
    app = _app(limit)
    with pytest.raises(ConfigError, match=r"the key gives ip.*takes user"):
        asyncio.run(_codes(app, ["a"]))


@fg_django.capped(Rule("2 concurrent", lease=60))
def django_leased(request: HttpRequest) -> HttpResponse:
    return HttpResponse("leased")


@fg_django.capped(Rule("2/minute"))
def django_rated(request: HttpRequest) -> HttpResponse:
    return HttpResponse("rated")


urlpatterns = [path("leased", django_leased), path("rated", django_rated)]


@pytest.mark.parametrize("middleware", [True, False])
def test_a_django_cap_of_a_rule_without_by_is_per_client(middleware: bool) -> None:
    """Through the middleware (decided with the default limits) and without it (the view's
    wrapper decides alone)."""
    chosen: dict[str, Any] = {} if middleware else {"MIDDLEWARE": []}
    guard = Guard(MemoryBackend(ManualClock(1_000)))
    with override_settings(
        FREQGUARD_BACKEND=guard, ROOT_URLCONF="tests.integrations.test_keyed_rules", **chosen
    ):
        client = Client()
        ips = ["10.0.0.1", "10.0.0.1", "10.0.0.2"]
        leased = [client.get("/leased", REMOTE_ADDR=ip).status_code for ip in ips]
        ips = ["10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2"]
        rated = [client.get("/rated", REMOTE_ADDR=ip).status_code for ip in ips]
    assert leased == [200, 200, 200]  # each given back when its view returned
    assert rated == [200, 200, 429, 200]
