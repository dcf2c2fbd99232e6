"""Calls and requests in flight: ``@capped`` and the ASGI and WSGI middleware hold a lease
of a policy with a concurrency rule while the call or the request runs, and give it back
when it ends, however it ends."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from freqguard import (
    AsyncGuard,
    CapExceeded,
    ConfigError,
    Guard,
    ManualClock,
    Policy,
    Rule,
    capped,
)
from freqguard.integrations.asgi import FreqGuardMiddleware, Limit, Receive, Scope, Send

ONE = Policy("one", Rule("1 concurrent", by="user", lease=60))
TWO = Policy("two", Rule("2 concurrent", lease=60), Rule("10/minute"))


def test_a_capped_function_holds_a_lease_while_it_runs() -> None:
    guard = Guard(policies=[ONE], clock=ManualClock(1_000))
    inner: list[object] = []

    @capped("one", guard=guard, key="user")
    def call(user: str, again: bool) -> str:
        if again:
            try:
                call(user, False)  # the same user while the first call runs: denied
            except CapExceeded as exc:
                inner.append(exc.decision.retry_after)
            inner.append(call("other", False))  # another user's lease is its own
        return "done"

    assert call("u", True) == "done"
    assert inner == [60.0, "done"]
    assert call("u", False) == "done"  # given back when it returned

    @capped("one", guard=guard, key="user")
    def failing(user: str) -> None:
        raise RuntimeError("the vendor failed")

    with pytest.raises(RuntimeError):
        failing("v")
    assert guard.peek("one", user="v").remaining == 1  # given back when it raised


def test_async_calls_in_flight_never_pass_the_cap() -> None:
    guard = AsyncGuard(policies=[TWO], clock=ManualClock(1_000))
    running, most = 0, 0

    async def main() -> list[str]:
        gate = asyncio.Event()

        @capped("two", guard=guard, on_exceeded="skip")
        async def call() -> str:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await gate.wait()
            running -= 1
            return "ran"

        tasks = [asyncio.create_task(call()) for _ in range(5)]
        for _ in range(100):  # bounded: until the three denied ones have returned
            await asyncio.sleep(0)
            if sum(task.done() for task in tasks) == 3:
                break
        gate.set()
        return [str(result) for result in await asyncio.gather(*tasks)]

    assert sorted(asyncio.run(main())) == ["None", "None", "None", "ran", "ran"]
    assert most == 2


def test_a_lease_cannot_be_waited_for_or_taken_by_a_with_block() -> None:
    guard = Guard(policies=[ONE], clock=ManualClock(1_000))
    with pytest.raises(ConfigError, match="on_exceeded='wait' waits for a rate's turn"):
        capped("one", guard=guard, key="user", on_exceeded="wait", timeout=1)(lambda user: 1)
    with (
        pytest.raises(ConfigError, match=r"take one with guard\.lease\('one'"),
        capped("one", guard=guard, context={"user": "u"}),
    ):
        pass


def test_the_asgi_middleware_caps_requests_in_flight() -> None:
    guard = AsyncGuard(policies=[TWO], clock=ManualClock(1_000))
    gate = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        await gate.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    capped_app = FreqGuardMiddleware(
        app, guard=guard, limits=[Limit("/llm", rule=TWO, key=lambda request: {})]
    )

    async def main() -> tuple[list[int], int]:
        transport = httpx.ASGITransport(app=capped_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            tasks = [asyncio.create_task(client.get("/llm")) for _ in range(5)]
            for _ in range(200):  # bounded: until the three refused ones are answered
                await asyncio.sleep(0)
                if sum(task.done() for task in tasks) == 3:
                    break
            gate.set()
            statuses = sorted(r.status_code for r in await asyncio.gather(*tasks))
            after = (await client.get("/llm")).status_code  # both given back
        return statuses, after

    assert asyncio.run(main()) == ([200, 200, 429, 429, 429], 200)


def test_the_wsgi_middleware_holds_a_lease_until_the_server_closes_the_response() -> None:
    """A request is in flight until the server has sent its body and closed it (PEP 3333):
    the lease is given back then, or when the app raises; a refused request holds none."""
    from werkzeug.test import Client

    from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware
    from freqguard.integrations.wsgi import Limit as WSGILimit

    guard = Guard(policies=[TWO], clock=ManualClock(1_000))
    closed: list[str] = []

    class Body:
        def __init__(self, path: str) -> None:
            self.path = path

        def __iter__(self) -> Iterator[bytes]:
            yield b"ok"

        def close(self) -> None:
            closed.append(self.path)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if environ["PATH_INFO"] == "/fail":
            raise RuntimeError("the app failed")
        start_response("200 OK", [("content-type", "text/plain")])
        return Body(environ["PATH_INFO"])

    wsgi = WSGIMiddleware(
        app, guard=guard, limits=[WSGILimit("/{name}", rule=TWO, key=lambda request: {})]
    )
    client = Client(wsgi)
    first, second = client.get("/a", buffered=False), client.get("/b", buffered=False)
    assert (first.status_code, second.status_code) == (200, 200)
    assert client.get("/c").status_code == 429  # two in flight: the cap
    first.close()
    assert closed == ["/a"]
    third = client.get("/d", buffered=False)  # the first one's lease given back
    assert third.status_code == 200
    assert client.get("/e").status_code == 429
    second.close()  # one in flight now: the third
    with pytest.raises(RuntimeError):
        client.get("/fail")  # admitted, then the app raised: its lease given back at once
    fourth = client.get("/f", buffered=False)  # else the cap would refuse it
    assert fourth.status_code == 200
    assert client.get("/g").status_code == 429
    fourth.close()
    third.close()
    assert guard.peek("two").remaining == 2  # every lease given back


def test_flask_holds_a_lease_while_the_view_runs() -> None:
    """A view capped by a concurrency rule: a request made while it runs is refused, and
    the lease is given back at the request's teardown, the view's error included."""
    from flask import Flask, request

    from freqguard.integrations.flask import FreqGuard

    app = Flask(__name__)
    fg = FreqGuard(app, guard=Guard(clock=ManualClock(1_000)))

    @app.get("/run")
    @fg.capped(Rule("1 concurrent", by="client", lease=60))
    def run() -> str:
        if request.args.get("inner"):
            return "inner"
        if request.args.get("fail"):
            raise RuntimeError("the view failed")
        return str(app.test_client().get("/run?inner=1").status_code)

    client = app.test_client()
    assert client.get("/run").text == "429"
    assert client.get("/run").text == "429"  # given back after the first
    app.testing = False  # the view's error answered as a 500, not raised into the test
    failed = client.get("/run?fail=1")
    assert failed.status_code == 500
    failed.close()  # as a server does once it is sent (Flask's error page is a stream)
    assert client.get("/run").text == "429"  # given back after the error too


def test_flask_holds_a_streamed_answers_lease_until_its_body_is_sent() -> None:
    """A streamed view returns before its body is sent (Flask tears the request down
    then): the lease is held until the server closes the response."""
    from flask import Flask, Response

    from freqguard.integrations.flask import FreqGuard

    app = Flask(__name__)
    guard = Guard(clock=ManualClock(1_000))
    fg = FreqGuard(app, guard=guard)

    @app.get("/stream")
    @fg.capped(Rule("1 concurrent", by="client", lease=60))
    def stream() -> Response:
        return Response(iter([b"a", b"b"]))

    client = app.test_client()
    first = client.get("/stream", buffered=False)
    assert first.status_code == 200
    assert client.get("/stream").status_code == 429  # the first is still in flight
    assert first.get_data() == b"ab"
    first.close()
    second = client.get("/stream", buffered=False)
    assert second.status_code == 200
    second.close()  # closed before its body was sent
    assert client.get("/stream").status_code == 200


def test_flask_gives_a_streamed_answers_lease_back_when_a_later_after_request_fails() -> None:
    """An ``after_request`` that runs after freqguard's (registered before the extension)
    and raises: Flask answers 500 and drops the streamed response without closing it, so
    the lease tied to its closing stayed held until it lapsed (review). The request's
    teardown, told of the error, gives it back."""
    from flask import Flask, Response

    from freqguard.integrations.flask import FreqGuard

    app = Flask(__name__)
    app.testing = False  # the error is answered as a 500, as in production

    @app.after_request
    def fails(response: Response) -> Response:
        if response.status_code == 200 and app.config.get("FAIL"):
            raise RuntimeError("an after_request that fails")
        return response

    fg = FreqGuard(app, guard=Guard(clock=ManualClock(1_000)))

    @app.get("/stream")
    @fg.capped(Rule("1 concurrent", by="client", lease=60))
    def stream() -> Response:
        return Response(iter([b"a", b"b"]))

    client = app.test_client()
    app.config["FAIL"] = True
    assert client.get("/stream").status_code == 500
    app.config["FAIL"] = False
    answer = client.get("/stream", buffered=False)
    assert answer.status_code == 200  # the failed request's lease was given back
    answer.close()
