"""client_ip: only the header the trusted proxies set, walked from the right, keyed on a
validated (and optionally widened) address, never on a string the client can rotate."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import AsyncGuard, ConfigError, ManualClock, MemoryBackend
from freqguard.integrations._http import KeyFunc
from freqguard.integrations.asgi import request_info
from freqguard.integrations.flask import remote_address
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, client_ip

PROXY = ("10.0.0.1", 5)  # the peer: a trusted proxy in 10.0.0.0/8


def _app(key: KeyFunc, clock: ManualClock) -> FreqGuardMiddleware:
    async def page(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return FreqGuardMiddleware(
        Starlette(routes=[Route("/page", page, methods=["GET", "POST"])]),
        guard=AsyncGuard(MemoryBackend(), clock=clock),
        limits=[Limit("/page", "5/minute", key=key)],
    )


def _codes(
    app: object,
    headers: Sequence[Sequence[tuple[str, str]]],
    client: tuple[str, int] = PROXY,
) -> list[int]:
    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=client)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [(await http.get("/page", headers=list(h))).status_code for h in headers]

    return asyncio.run(run())


CAPPED = [200] * 5 + [429] * 3


def test_a_forwarded_header_the_proxy_does_not_set_is_ignored(clock: ManualClock) -> None:
    # nginx appends X-Forwarded-For and passes the client's own Forwarded header through
    app = _app(client_ip(["10.0.0.0/8"]), clock)
    calls = [
        [("Forwarded", f"for=198.51.100.{n}"), ("X-Forwarded-For", "203.0.113.9")] for n in range(8)
    ]
    assert _codes(app, calls) == CAPPED


def test_ports_are_not_part_of_the_key(clock: ManualClock) -> None:
    app = _app(client_ip(["10.0.0.0/8"]), clock)
    calls = [[("X-Forwarded-For", f"203.0.113.9:{40000 + n}")] for n in range(8)]
    assert _codes(app, calls) == CAPPED
    app = _app(client_ip(["10.0.0.0/8"], header="forwarded"), clock)
    calls = [[("Forwarded", f'for="203.0.113.9:{40000 + n}"')] for n in range(4)]
    calls += [[("Forwarded", f'for="[2001:db8::9]:{n}";proto=https')] for n in range(4)]
    calls += [[("Forwarded", "for=2001:db8::9")]]  # unquoted, lenient: the same address
    assert _codes(app, calls) == [200] * 4 + [200] * 4 + [200]
    assert _codes(app, calls[:2]) == [200, 429]  # 203.0.113.9 had 4, now 5, then denied


def test_invalid_hops_cannot_be_rotated(clock: ManualClock) -> None:
    app = _app(client_ip(["10.0.0.0/8"]), clock)
    calls = [[("X-Forwarded-For", f"garbage-{n}")] for n in range(8)]
    assert _codes(app, calls) == CAPPED
    app = _app(client_ip(["10.0.0.0/8"], header="forwarded"), clock)
    calls = [[("Forwarded", value)] for value in ("for=unknown", "for=_hidden", "for=_x1")]
    calls += [[("Forwarded", "proto=https")], [("Forwarded", 'for="_a,b"')]]
    calls += [[("Forwarded", "for=1.2.3.4.5")], [("Forwarded", 'for="[2001:db8::1"')]]
    calls += [[("Forwarded", "for=")]]
    assert _codes(app, calls) == CAPPED  # all the one peer: no key per value


def test_ipv6_clients_are_keyed_by_their_64_prefix(clock: ManualClock) -> None:
    app = _app(client_ip(["10.0.0.0/8"]), clock)
    calls = [[("X-Forwarded-For", f"2001:db8:1:2::{n:x}")] for n in range(1, 9)]
    assert _codes(app, calls) == CAPPED
    # directly connected IPv6 peers too
    app = _app(client_ip(), clock)
    calls = [[] for _ in range(8)]
    codes: list[int] = []
    for n in range(8):
        codes += _codes(app, calls[:1], client=(f"2001:db8:1:2::{n + 1:x}", 1))
    assert codes == CAPPED


def _key(key: KeyFunc, peer: str | None, headers: Sequence[tuple[str, str]] = ()) -> object:
    scope = {
        "type": "http",
        "path": "/",
        "method": "GET",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": (peer, 1) if peer is not None else None,
    }
    return key(request_info(scope))["client"]  # type: ignore[index]


TRUSTED = ["10.0.0.0/8", "2001:db8:ffff::/48"]


@pytest.mark.parametrize(
    ("header", "lines", "expected"),
    [
        # walked from the right: trusted hops skipped, the first other is the client
        ("x-forwarded-for", ["198.51.100.7, 10.1.1.1, 10.2.2.2"], "198.51.100.7"),
        ("x-forwarded-for", ["6.6.6.6, 198.51.100.7, 10.1.1.1"], "198.51.100.7"),
        # several lines are one list, in order
        ("x-forwarded-for", ["6.6.6.6, 198.51.100.7", "10.1.1.1"], "198.51.100.7"),
        ("x-forwarded-for", ["198.51.100.7", "10.1.1.1, 10.2.2.2"], "198.51.100.7"),
        # every hop trusted: the farthest one
        ("x-forwarded-for", ["10.3.3.3, 10.1.1.1"], "10.3.3.3"),
        # no header: the peer
        ("x-forwarded-for", [], "10.0.0.1"),
        # ports, brackets, zones, case, IPv4-mapped IPv6, prefixes
        ("x-forwarded-for", ["198.51.100.7:8080"], "198.51.100.7"),
        ("x-forwarded-for", ["[2001:DB8:0:0:1::1]:443"], "2001:db8::/64"),
        ("x-forwarded-for", ["fe80::1%eth0"], "fe80::/64"),
        ("x-forwarded-for", ["::ffff:198.51.100.7"], "198.51.100.7"),
        ("x-forwarded-for", ["[::ffff:10.9.9.9]:1, 10.1.1.1"], "10.9.9.9"),
        ("x-forwarded-for", ["2001:db8:ffff::5, 2001:db8:1::1"], "2001:db8:1::/64"),
        # an invalid hop: the trusted hop that reported it (here the second proxy)
        ("x-forwarded-for", ["198.51.100.7, unknown, 10.2.2.2"], "10.2.2.2"),
        ("x-forwarded-for", ["198.51.100.7, , 10.2.2.2"], "10.2.2.2"),
        ("x-forwarded-for", ["198.51.100.7, 010.1.1.1"], "10.0.0.1"),
        ("x-forwarded-for", [" "], "10.0.0.1"),
        ("x-real-ip", ["198.51.100.7"], "198.51.100.7"),
        ("x-real-ip", ["nonsense"], "10.0.0.1"),
        ("forwarded", ['for=198.51.100.7;proto=https, for="[2001:db8:ffff::1]"'], "198.51.100.7"),
        ("forwarded", ['For="198.51.100.7";by=10.0.0.1'], "198.51.100.7"),
        ("forwarded", ['for="\\"q\\"", for=10.1.1.1'], "10.1.1.1"),
        ("forwarded", ["for=198.51.100.7", "for=10.1.1.1"], "198.51.100.7"),
        ("forwarded", ["for=unknown, for=10.1.1.1"], "10.1.1.1"),
        ("forwarded", ["for=198.51.100.7, by=10.1.1.1"], "10.0.0.1"),
    ],
)
def test_hops(header: str, lines: list[str], expected: str) -> None:
    key = client_ip(TRUSTED, header=header)
    name = {"x-forwarded-for": "X-Forwarded-For", "x-real-ip": "X-Real-IP"}.get(header, header)
    assert _key(key, "10.0.0.1", [(name, line) for line in lines]) == expected


def test_headers_from_an_untrusted_peer_are_never_read() -> None:
    key = client_ip(TRUSTED)
    assert _key(key, "198.51.100.7", [("X-Forwarded-For", "6.6.6.6")]) == "198.51.100.7"
    assert _key(key, "::ffff:10.0.0.1", [("X-Forwarded-For", "6.6.6.6")]) == "6.6.6.6"
    assert _key(key, None) == ""
    assert _key(key, "testclient") == "testclient"  # not an address: the server's own label


def test_prefixes() -> None:
    wide = client_ip(ipv4_prefix=24, ipv6_prefix=48)
    assert _key(wide, "198.51.100.7") == "198.51.100.0/24"
    assert _key(wide, "2001:db8:1:2::1") == "2001:db8:1::/48"
    exact = client_ip(ipv4_prefix=32, ipv6_prefix=128)
    assert _key(exact, "2001:db8:1:2::1") == "2001:db8:1:2::1"
    assert _key(exact, "198.51.100.7") == "198.51.100.7"


def test_flask_remote_address_is_normalised_too() -> None:
    from freqguard.integrations.wsgi import request_info as wsgi_info

    info = wsgi_info({"REMOTE_ADDR": "2001:db8:1:2::7", "PATH_INFO": "/"})
    assert remote_address(info) == {"client": "2001:db8:1:2::/64"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trusted_proxies": ["10.0.0.0/33"]}, "'10.0.0.0/33'"),
        ({"trusted_proxies": ["proxy.local"]}, "'proxy.local'"),
        (
            {"header": "x-forwarded-host"},
            "x-forwarded-for, forwarded, x-real-ip; got 'x-forwarded-host'",
        ),
        ({"ipv4_prefix": 33}, "ipv4_prefix.*0 to 32.*33"),
        ({"ipv6_prefix": -1}, "ipv6_prefix.*0 to 128.*-1"),
        ({"ipv6_prefix": True}, "ipv6_prefix.*True"),
    ],
)
def test_bad_configuration_fails_at_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        client_ip(**kwargs)  # type: ignore[arg-type]


def test_a_single_network_string_is_one_network() -> None:
    assert _key(client_ip("10.0.0.0/8"), "10.0.0.1", [("X-Forwarded-For", "6.6.6.6")]) == (
        "6.6.6.6"
    )
