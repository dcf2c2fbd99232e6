"""Flask: ``@fg.capped`` on an ``async def`` view (Flask's ``flask[async]``, asgiref) is
decided as on a sync view, and the view is awaited.

Found by a new user coming from Flask-Limiter: the cap's plain wrapper made Flask see a sync
view, whose return value was the view's coroutine, never awaited: every request a 500, and
its hit still counted.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask, request
from flask.testing import FlaskClient

from freqguard import Guard, ManualClock, MemoryBackend, Rule
from freqguard.integrations.flask import FreqGuard

pytest.importorskip("asgiref", reason="Flask runs async views with asgiref (flask[async])")


def _client(clock: ManualClock, build: Callable[[Flask, FreqGuard], None]) -> FlaskClient:
    app = Flask(__name__)
    fg = FreqGuard(app, guard=Guard(MemoryBackend(), clock=clock))
    build(app, fg)
    return app.test_client()


def test_a_plain_cap_on_an_async_view(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        @app.get("/a")
        @fg.capped("2/minute")
        async def a() -> str:
            return "awaited"

    client = _client(clock, build)
    answers = [client.get("/a") for _ in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert answers[0].text == "awaited"
    clock.advance(61)
    assert client.get("/a").status_code == 200


def test_a_named_cap_on_async_views_is_one_budget(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        @app.get("/x")
        @fg.capped("2/minute", name="vendor")
        async def x() -> str:
            return "x"

        @app.get("/y")
        @fg.capped("2/minute", name="vendor")
        async def y() -> str:
            return "y"

    client = _client(clock, build)
    answers = [client.get(path) for path in ("/x", "/y", "/x")]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert [r.text for r in answers[:2]] == ["x", "y"]


def test_a_methods_cap_on_an_async_view(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        @app.route("/p", methods=["GET", "POST"])
        @fg.capped("1/minute", methods=["POST"])
        async def p() -> str:
            return request.method

    client = _client(clock, build)
    gets = [client.get("/p") for _ in range(3)]
    assert [(r.status_code, r.text) for r in gets] == [(200, "GET")] * 3
    assert [client.post("/p").status_code for _ in range(2)] == [200, 429]


def test_deduct_when_on_an_async_view_refunds_what_it_does_not_count(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        @app.post("/login")
        @fg.capped("2/minute", deduct_when=lambda response: response.status_code == 401)
        async def login() -> tuple[str, int]:
            return ("ok", 200) if request.form.get("password") == "right" else ("no", 401)

    client = _client(clock, build)
    good = [client.post("/login", data={"password": "right"}).status_code for _ in range(3)]
    bad = [client.post("/login", data={"password": "wrong"}).status_code for _ in range(3)]
    assert good + bad == [200, 200, 200, 401, 401, 429]


def test_an_async_view_holds_its_lease_while_it_runs_and_gives_it_back(
    clock: ManualClock,
) -> None:
    """A concurrency rule: a request made while the view is awaited is refused; the lease
    goes back at the request's teardown, after the view's error too."""

    def build(app: Flask, fg: FreqGuard) -> None:
        @app.get("/run")
        @fg.capped(Rule("1 concurrent", by="client", lease=60))
        async def run() -> str:
            if request.args.get("fail"):
                raise RuntimeError("the view failed")
            return str(app.test_client().get("/run?inner=1").status_code)

    client = _client(clock, build)
    assert [client.get("/run").text for _ in range(2)] == ["429", "429"]
    client.application.testing = False  # the view's error answered as a 500
    failed = client.get("/run?fail=1")
    assert failed.status_code == 500
    failed.close()
    assert client.get("/run").text == "429"  # given back after the error too
