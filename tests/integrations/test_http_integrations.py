"""Starlette/FastAPI (ASGI transport and a real uvicorn), Flask and WSGI (test client and a
real server in a thread), headers checked with a Structured Fields parser."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx
import pytest
from http_sfv.item import Item
from http_sfv.list import List

from examples.fastapi_app import build as build_fastapi
from examples.flask_app import build as build_flask
from examples.starlette_app import build as build_starlette
from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware
from freqguard.integrations.wsgi import Limit
from tests.servers import free_port


def _guard(clock: ManualClock) -> AsyncGuard:
    return AsyncGuard(MemoryBackend(), clock=clock)


async def _requests(
    app: object,
    calls: Sequence[tuple[str, str, dict[str, str]]],
    client: tuple[str, int] = ("9.9.9.9", 1234),
) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app, client=client)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return [await http.request(method, url, headers=headers) for method, url, headers in calls]


def test_starlette_429_problem_retry_after_and_headers(clock: ManualClock) -> None:
    app = build_starlette(_guard(clock))
    responses = asyncio.run(
        _requests(app, [("POST", "/sms/123", {})] * 11 + [("GET", "/health", {})])
    )
    assert [r.status_code for r in responses] == [200] * 10 + [429, 200]
    denied = responses[10]
    assert denied.headers["content-type"] == "application/problem+json"
    problem = denied.json()
    assert problem["status"] == 429
    assert problem["title"] == "Too Many Requests"
    assert problem["violated_policies"]
    assert int(denied.headers["retry-after"]) == 60
    allowed = responses[0]
    policy = List()
    policy.parse(allowed.headers["ratelimit-policy"].encode())
    assert policy[0].params["q"] == 10
    assert policy[0].params["w"] == 60
    limit = Item()
    limit.parse(allowed.headers["ratelimit"].encode())
    assert limit.params["r"] == 9
    assert limit.params["t"] == 60
    state = Item()
    state.parse(denied.headers["ratelimit"].encode())
    assert state.params["r"] == 0
    assert int(denied.headers["retry-after"]) >= state.params["t"]
    assert "ratelimit" not in responses[11].headers  # /health is not capped


def test_api_key_header_keys(clock: ManualClock) -> None:
    app = build_starlette(_guard(clock))
    calls = [("GET", "/search", {"X-API-Key": "k1"})] * 6 + [
        ("GET", "/search", {"X-API-Key": "k2"})
    ]
    codes = [r.status_code for r in asyncio.run(_requests(app, calls))]
    assert codes == [200] * 5 + [429, 200]


def test_forwarded_for_is_trusted_only_from_trusted_proxies(clock: ManualClock) -> None:
    app = build_starlette(_guard(clock), trusted_proxies=("10.0.0.0/8",))
    # from a trusted proxy, each X-Forwarded-For client has its own budget
    via_proxy = [
        ("POST", "/sms/1", {"X-Forwarded-For": f"1.2.3.{n % 2}, 10.0.0.7"}) for n in range(20)
    ]
    codes = [r.status_code for r in asyncio.run(_requests(app, via_proxy, client=("10.0.0.1", 5)))]
    assert codes == [200] * 20
    # an untrusted peer cannot spoof: its header is ignored and its own address is capped
    spoofed = [("POST", "/sms/1", {"X-Forwarded-For": f"5.5.5.{n}"}) for n in range(11)]
    codes = [r.status_code for r in asyncio.run(_requests(app, spoofed, client=("8.8.8.8", 5)))]
    assert codes == [200] * 10 + [429]
    # the example's proxies set X-Forwarded-For: a Forwarded header is the client's own
    forwarded = [
        ("POST", "/sms/1", {"Forwarded": f'for="[2001:db8::{n}]";proto=https'}) for n in range(11)
    ]
    codes = [r.status_code for r in asyncio.run(_requests(app, forwarded, client=("10.1.1.1", 5)))]
    assert codes == [200] * 10 + [429]


async def _websocket(app: object) -> list[dict[str, object]]:
    """Drive one WebSocket handshake through the ASGI app; returns what it sent."""
    sent: list[dict[str, object]] = []
    inbox: list[dict[str, object]] = [
        {"type": "websocket.connect"},
        {"type": "websocket.disconnect", "code": 1000},
    ]
    scope = {
        "type": "websocket",
        "path": "/ws",
        "headers": [],
        "client": ("9.9.9.9", 1),
        "scheme": "ws",
        "query_string": b"",
        "root_path": "",
        "subprotocols": [],
        "asgi": {"version": "3.0"},
    }

    async def receive() -> dict[str, object]:
        message: dict[str, object] = inbox.pop(0) if inbox else {"type": "websocket.disconnect"}
        return message

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    await app(scope, receive, send)  # type: ignore[operator]
    return sent


def test_websocket_handshakes_are_capped(clock: ManualClock) -> None:
    app = build_starlette(_guard(clock))

    async def three() -> list[list[dict[str, object]]]:
        return [await _websocket(app) for _ in range(3)]

    first, second, third = asyncio.run(three())
    assert first[0]["type"] == "websocket.accept"
    assert second[0]["type"] == "websocket.accept"
    assert third == [{"type": "websocket.close", "code": 1008, "reason": "rate limited"}]


def test_fastapi_dependencies_key_on_validated_parameters() -> None:
    app = build_fastapi()
    calls: list[tuple[str, str, dict[str, str]]] = [("GET", "/users/7", {})] * 6
    calls += [("GET", "/users/8", {}), ("GET", "/users/x", {})]
    calls += [("POST", "/login", {})] * 4
    codes = [r.status_code for r in asyncio.run(_requests(app, calls))]
    assert codes == [200] * 5 + [429, 200, 422] + [200] * 3 + [429]


@pytest.fixture
def uvicorn_server() -> Iterator[str]:
    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        build_starlette(AsyncGuard()), host="127.0.0.1", port=port, log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        threading.Event().wait(0.05)  # waiting for a real server to bind, bounded
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_against_a_real_uvicorn_server(uvicorn_server: str) -> None:
    with httpx.Client(base_url=uvicorn_server) as http:
        codes = [http.post("/sms/42").status_code for _ in range(11)]
        spoofed = http.post("/sms/42", headers={"X-Forwarded-For": "7.7.7.7"})
    assert codes == [200] * 10 + [429]
    assert spoofed.status_code == 200  # 127.0.0.1 is a trusted proxy in the example app


def test_flask_views_defaults_exemptions_and_headers() -> None:
    app = build_flask({"FREQGUARD_DEFAULT_LIMITS": "4/minute"})
    client = app.test_client()
    codes = [client.post("/sms").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]  # /sms: 3/minute, and the default 4/minute too
    denied = client.post("/sms")
    assert denied.headers["Content-Type"] == "application/problem+json"
    assert json.loads(denied.data)["status"] == 429
    assert "Retry-After" in denied.headers
    # the default limit counts per route: /sms used none of /'s, and its denials none of its own
    assert [client.get("/").status_code for _ in range(5)] == [200] * 4 + [429]
    assert all(client.get("/health").status_code == 200 for _ in range(10))  # exempt


def test_flask_and_wsgi_behind_a_real_server() -> None:
    flask_app = build_flask({"FREQGUARD_DEFAULT_LIMITS": None})
    flask_app.wsgi_app = WSGIMiddleware(  # type: ignore[method-assign]
        flask_app.wsgi_app,
        guard=Guard(MemoryBackend(ManualClock(1e9))),
        limits=[Limit("/{rest:path}", "5/minute", methods=["GET"])],
        headers="draft6",
    )

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = make_server("127.0.0.1", 0, flask_app, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}") as http:
            responses = [http.get("/") for _ in range(6)]
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    assert responses[0].headers["RateLimit-Limit"] == "5"
    assert responses[0].headers["RateLimit-Remaining"] == "4"
    assert responses[5].headers["Content-Type"] == "application/problem+json"


def test_a_429_names_no_policy_the_user_did_not_name(clock: ManualClock) -> None:
    """The name a Limit makes for itself (``http.POST-sms--recipient-.7a728a8bb24a``) names
    keys in the store, not something a client can use: a 429 shows only a given name."""
    app = build_starlette(_guard(clock))
    denied = asyncio.run(_requests(app, [("POST", "/sms/123", {})] * 11))[-1]
    assert denied.status_code == 429
    assert "policy" not in denied.json()

    def page(environ: object, start: Any) -> list[bytes]:
        start("200 OK", [])
        return [b"page"]

    named = WSGIMiddleware(
        page, guard=Guard(MemoryBackend(clock)), limits=[Limit("/", "1/minute", name="front")]
    )
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "1.2.3.4"}
    bodies = [b"".join(named(environ, lambda status, headers: None)) for _ in range(2)]
    assert json.loads(bodies[1])["policy"] == "front"
