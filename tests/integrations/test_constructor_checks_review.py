"""Review of the construction-time checks of the integrations (f8bb43e): arguments that
legitimate users write, refused since (false refusals), and a gap of the same kind left
open (a key maker given uncalled that is still taken, and 500s every request)."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, client_ip, path_param
from tests.conftest import START


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _get(app: Any, urls: list[str], peer: str = "9.9.9.9", headers: Any = None) -> list[int]:
    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=(peer, 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [(await client.get(u, headers=headers)).status_code for u in urls]

    return asyncio.run(main())


def _capped(limit: Limit) -> Any:
    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    inner = Starlette(routes=[Route("/{rest:path}", _ok)])
    return FreqGuardMiddleware(inner, guard=guard, limits=[limit])


# -- limit_dependency keyed by a parameter of its route ---------------------------------------


def test_limit_dependency_keyed_by_a_path_param_of_its_route_is_taken() -> None:
    """``Depends(limit_dependency(guard, "1/minute", key=path_param("item_id"), name=...))``
    on ``/items/{item_id}``: the dependency hands the route's ``request.path_params`` to
    the key, so each item had a budget of its own (200, 429, 200 before f8bb43e). Now the
    dependency's internal ``Limit("/{rest:path}", ...)`` is checked to name ``item_id``
    (the path_param check), and limit_dependency refuses: ConfigError "route pattern
    '/{rest:path}' has no parameter 'item_id'", a pattern the user never wrote."""
    fastapi = pytest.importorskip("fastapi")
    from freqguard.integrations.fastapi import limit_dependency

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    dependency = limit_dependency(guard, "1/minute", key=path_param("item_id"), name="items")
    app = fastapi.FastAPI()

    @app.get("/items/{item_id}", dependencies=[fastapi.Depends(dependency)])  # type: ignore[untyped-decorator]
    async def item(item_id: str) -> dict[str, str]:
        return {"item": item_id}

    assert _get(app, ["/items/1", "/items/1", "/items/2"]) == [200, 429, 200]


# -- trusted_proxies as ipaddress objects ----------------------------------------------------


@pytest.mark.parametrize(
    "proxies",
    [
        [ipaddress.ip_address("10.0.0.7")],
        (ipaddress.ip_address("10.0.0.7"), "192.168.0.0/16"),
        ipaddress.ip_network("10.0.0.0/24"),
    ],
    ids=["a list of ip_address", "a tuple mixing ip_address and str", "one ip_network"],
)
def test_trusted_proxies_given_as_ipaddress_objects_are_taken(proxies: Any) -> None:
    """``ipaddress.ip_network()`` takes address objects (and a network object iterates its
    addresses), so before f8bb43e these worked. Now each item must be a str or a network
    object: ConfigError "trusted_proxies must be IP addresses or networks like
    '10.0.0.0/8', got IPv4Address('10.0.0.7')" -- an IP address, refused as not one. (One
    network object, not in a list, is refused naming its first address; taken item by item
    it would also make a /8 16 million networks.)"""
    app = _capped(Limit("/x", "1/minute", key=client_ip(proxies)))
    # behind the trusted 10.0.0.7 the client is the forwarded address: two clients, two budgets
    one = _get(app, ["/x", "/x"], peer="10.0.0.7", headers={"x-forwarded-for": "203.0.113.1"})
    two = _get(app, ["/x"], peer="10.0.0.7", headers={"x-forwarded-for": "203.0.113.2"})
    assert (one, two) == ([200, 429], [200])


# -- the documented signature of client_ip ---------------------------------------------------


def test_client_ip_called_with_the_defaults_its_docs_give_is_taken() -> None:
    """docs/integrations.md documents ``client_ip(trusted_proxies=(), *,
    header="x-forwarded-for", ipv4_prefix=32, ipv6_prefix=64)``; the default is now None,
    and the documented default written out (a wrapper passing its own ``header=`` default
    on, as ``user_or_ip`` did) is refused: ConfigError "client_ip(header='x-forwarded-for')
    reads the header only from a trusted proxy". The docs' signature and the code must
    agree: either the documented call works or the docs show ``header=None``."""
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "integrations.md").read_text()
    documented = 'client_ip(trusted_proxies=(), *, header="x-forwarded-for"'
    if documented in docs:
        client_ip(trusted_proxies=(), header="x-forwarded-for", ipv4_prefix=32, ipv6_prefix=64)


# -- a key maker given uncalled: user_or_ip --------------------------------------------------


def test_user_or_ip_given_uncalled_is_refused_as_client_ip_is() -> None:
    """``key=client_ip`` and ``key=header`` uncalled are now refused when the Limit is
    made (KEY_MAKERS). ``key=user_or_ip`` (docs/django.md: ``key=user_or_ip()``) makes a
    key function too and takes one argument, so it passes the check, and every request is
    a 500: ``user_or_ip(request)`` raises ConfigError "trusted_proxies must be an address
    or network ... got <RequestInfo ...>" at request time."""
    pytest.importorskip("django")
    from freqguard.integrations.django import user_or_ip

    with pytest.raises(ConfigError, match=r"user_or_ip\("):
        Limit("/x", "1/minute", key=user_or_ip)  # type: ignore[arg-type]


# -- header(missing=...) takes any callable, unchecked ---------------------------------------


@pytest.mark.parametrize(
    "missing",
    [client_ip, lambda: {"client": "anon"}],
    ids=["client_ip uncalled", "a function of no argument"],
)
def test_a_missing_key_that_cannot_key_a_request_is_refused_when_header_is_made(
    missing: Any,
) -> None:
    """``key=`` is checked as the Limit is made (a key maker uncalled, a function that
    cannot take the request); ``header(..., missing=...)``, whose docs say "a key function
    (client_ip())", takes any callable: ``missing=client_ip`` (uncalled) or a
    Flask-Limiter-style ``lambda: ...`` is accepted, and every request without the header
    is a 500 (ConfigError / TypeError raised inside the key function), never a 400/429."""
    from freqguard.integrations.starlette import header

    with pytest.raises(ConfigError, match=r"missing"):
        header("X-User", missing=missing)
