"""A fourth review from Flask-Limiter's side: what an earlier pass found and left. A
misspelt ``methods=`` taken (the cap matched no request), two views sharing one ``name=``
with different keys (a 500 at every request, hinting ``add_policy``), a key function
reading ``request.remote_addr`` told of Starlette, and ``RATELIMIT_DEFAULT`` on an app
with no freqguard limit at all (a warning, every route uncapped)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from flask import Flask

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations.flask import FreqGuard, client_ip, header


def _app(clock: ManualClock, **settings: object) -> tuple[Flask, FreqGuard]:
    app = Flask(__name__)
    app.config.update(settings)
    app.testing = True  # a view's error is raised, not answered 500
    return app, FreqGuard(app, guard=Guard(MemoryBackend(clock)))


def _page() -> str:
    return "ok"


def first() -> str:
    return "a"


def second() -> str:
    return "b"


def _names_both(error: ConfigError) -> None:
    """The error of one name given two keys: both views, the rule, no ``add_policy``."""
    said = str(error)
    assert "'first'" in said, said
    assert "'second'" in said, said
    assert "same rates and key" in said, said
    assert "add_policy" not in said, said


@pytest.mark.parametrize(("typed", "meant"), [("POTS", "POST"), ("GTE", "GET")])
def test_a_misspelt_method_is_refused_at_decoration(
    clock: ManualClock, typed: str, meant: str
) -> None:
    """``@fg.capped("1/minute", methods=["GET", "POTS"])`` was taken: the cap matched no
    POST, every one reached the view uncapped (Django's ``@capped`` refuses it)."""
    _, fg = _app(clock)
    with pytest.raises(ConfigError, match=rf"'{typed}' is not an HTTP method.*'{meant}'"):
        fg.capped("1/minute", methods=["PUT", typed])


def test_an_extension_method_is_still_capped(clock: ManualClock) -> None:
    """A cache's ``PURGE`` (or WebDAV's methods) is a cap's to count, never a misspelling."""
    app, fg = _app(clock)
    app.route("/cache", methods=["PURGE"])(fg.capped("1/minute", methods=["PURGE"])(_page))
    client = app.test_client()
    assert [client.open("/cache", method="PURGE").status_code for _ in range(2)] == [200, 429]


def test_one_name_given_two_declared_keys_is_refused_at_decoration(clock: ManualClock) -> None:
    """Two views sharing ``name="s2"``, one keyed by a header, the other by the default
    key: every request to the second was a 500 saying "a different policy named 's2' is
    already registered (add_policy(..., replace=True) ...)", a hint for no Flask user.
    Both keys say their dimensions: refused as the second is capped, naming both views."""
    _, fg = _app(clock)

    fg.capped("2/minute", name="s2", key=header("X-User"))(first)
    with pytest.raises(ConfigError) as refused:
        fg.capped("2/minute", name="s2")(second)
    _names_both(refused.value)


def test_one_name_given_two_undeclared_keys_is_refused_at_decoration(clock: ManualClock) -> None:
    """Lambdas say no dimensions: two of them on one name were told apart only at the
    second view's first request, a 500 to its client. Two key functions (not one object)
    that cannot be compared are refused as the second view is capped, naming both views
    and the fix."""
    _, fg = _app(clock)
    by_user = fg.capped("2/minute", name="s2", key=lambda r: {"user": r.headers["x-user"]})
    by_ip = fg.capped("2/minute", name="s2", key=lambda r: {"ip": r.client})

    by_user(first)
    with pytest.raises(ConfigError) as refused:
        by_ip(second)
    _names_both(refused.value)
    said = str(refused.value)
    assert "same key function object" in said, said
    assert "<lambda>" in said, said


def test_a_declared_key_beside_a_lambda_on_one_name_is_refused_at_decoration(
    clock: ManualClock,
) -> None:
    """``client_ip()`` says its dimension, a lambda none: they cannot be compared either."""
    _, fg = _app(clock)
    fg.capped("2/minute", name="s2", key=client_ip())(first)
    with pytest.raises(ConfigError) as refused:
        fg.capped("2/minute", name="s2", key=lambda r: {"client": r.client})(second)
    _names_both(refused.value)


def test_one_key_function_object_on_both_views_is_one_budget(clock: ManualClock) -> None:
    """The fix the error names: one function, passed to each view's cap."""
    app, fg = _app(clock)

    def by_user(request: Any) -> dict[str, str]:
        return {"user": request.headers["x-user"]}

    app.get("/a")(fg.capped("2/minute", name="s2", key=by_user)(first))
    app.get("/b")(fg.capped("2/minute", name="s2", key=by_user)(second))
    client = app.test_client()
    asked = [client.get(p, headers={"x-user": "u"}).status_code for p in ("/a", "/b", "/a")]
    assert asked == [200, 200, 429]
    assert client.get("/b", headers={"x-user": "v"}).status_code == 200


def test_one_key_in_an_app_factory_called_twice_is_still_one_budget(clock: ManualClock) -> None:
    """An app factory run twice (an app per test) on one extension makes its views and
    their lambda anew, from the same source: the same key, never refused."""
    fg = FreqGuard(guard=Guard(MemoryBackend(clock)))

    def create_app() -> Flask:
        app = Flask(__name__)
        app.testing = True
        by_user = fg.capped("2/minute", name="s2", key=lambda r: {"user": r.headers["x-user"]})
        app.get("/a")(by_user(first))
        fg.init_app(app)
        return app

    create_app()
    client = create_app().test_client()
    asked = [client.get("/a", headers={"x-user": "u"}).status_code for _ in range(3)]
    assert asked == [200, 200, 429]


def test_one_name_keyed_alike_is_still_one_budget(clock: ManualClock) -> None:
    """The control: two ``client_ip()`` (two objects, one dimension) share the budget."""
    app, fg = _app(clock)

    app.get("/a")(fg.capped("2/minute", name="s2", key=client_ip())(first))
    app.get("/b")(fg.capped("2/minute", name="s2", key=client_ip())(second))
    client = app.test_client()
    assert [client.get(p).status_code for p in ("/a", "/b", "/a")] == [200, 200, 429]


def test_a_flask_request_attribute_names_flask_request(clock: ManualClock) -> None:
    """Flask-Limiter's key functions read ``flask.request``; ``key=lambda r:
    r.remote_addr`` got an AttributeError pointing to ``starlette.requests.Request``."""
    app, fg = _app(clock)
    as_flask = fg.capped("2/minute", key=lambda r: r.remote_addr)  # type: ignore[attr-defined]
    app.get("/a")(as_flask(_page))
    with pytest.raises(AttributeError) as raised:
        app.test_client().get("/a")
    said = str(raised.value)
    assert "flask.request.remote_addr" in said, said
    assert "starlette" not in said.lower(), said


def _warned(caplog: pytest.LogCaptureFixture, app: Flask, clock: ManualClock) -> str:
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    return caplog.text


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [
        ("RATELIMIT_DEFAULT", "FREQGUARD_DEFAULT_LIMITS"),
        ("RATELIMIT_APPLICATION", "FREQGUARD_APPLICATION_LIMITS"),
    ],
)
def test_their_limits_on_an_app_of_no_limit_are_refused(
    clock: ManualClock, theirs: str, ours: str
) -> None:
    """``RATELIMIT_DEFAULT = "2/minute"`` carried over, no freqguard limit at all: only a
    warning, and every route of the app went uncapped. Refused at the first request, once
    setup is over (a view may be capped after ``init_app``: test_review_today.py)."""
    app = Flask(__name__)
    app.config[theirs] = "2/minute"
    app.testing = True
    FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    app.get("/a")(_page)
    for _ in range(2):  # every request, until the app is given a limit
        with pytest.raises(ConfigError, match=rf"{theirs} .*no freqguard limit.*{ours} = '2/min"):
            app.test_client().get("/a")


@pytest.mark.parametrize(
    "beside",
    ["defaults", "application", "view", "blueprint"],
)
def test_their_limits_beside_ours_are_a_warning(
    clock: ManualClock, caplog: pytest.LogCaptureFixture, beside: str
) -> None:
    """A migration running both (freqguard's limits beside Flask-Limiter's setting) is
    warned of, as before."""
    from flask import Blueprint

    app = Flask(__name__)
    app.config["RATELIMIT_DEFAULT"] = "2/minute"
    fg = FreqGuard(guard=Guard(MemoryBackend(clock)))
    made: Any = {
        "defaults": lambda: app.config.update(FREQGUARD_DEFAULT_LIMITS="5/minute"),
        "application": lambda: app.config.update(FREQGUARD_APPLICATION_LIMITS="5/minute"),
        "view": lambda: app.get("/a")(fg.capped("5/minute")(_page)),
        "blueprint": lambda: app.register_blueprint(fg.capped("5/minute")(Blueprint("b", "b"))),
    }
    made[beside]()
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        fg.init_app(app)
    assert "RATELIMIT_DEFAULT is Flask-Limiter's setting" in caplog.text


def test_their_limits_read_by_flask_limiter_itself_are_a_warning(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Flask-Limiter still set up on the app reads its own setting: not uncapped."""
    flask_limiter = pytest.importorskip("flask_limiter")
    from flask_limiter.util import get_remote_address

    app = Flask(__name__)
    app.config["RATELIMIT_DEFAULT"] = "2/minute"
    flask_limiter.Limiter(get_remote_address, app=app, storage_uri="memory://")
    assert "RATELIMIT_DEFAULT is Flask-Limiter's setting" in _warned(caplog, app, clock)
