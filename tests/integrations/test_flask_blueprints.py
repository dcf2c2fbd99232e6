"""Flask: ``fg.capped(...)(blueprint)`` and ``fg.exempt(blueprint)``, as Flask-Limiter users
write ``limiter.limit(...)(bp)`` and ``limiter.exempt(bp)``.

A blueprint's cap counts each route on its own (``shared=True``: one budget), holds for views
added after it and for nested blueprints, replaces the default limits (``defaults=True``
keeps them) and is decided in one hit with the view's own cap. What is refused, at
decoration, at ``init_app`` or at the first request, is in
``test_flask_blueprint_refusals.py``; the rig is ``blueprint_rig.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Blueprint, Flask
from flask.testing import FlaskClient

from freqguard import ManualClock
from freqguard.integrations.flask import FreqGuard
from tests.integrations.blueprint_rig import Build, _app, _page


def _client(clock: ManualClock, defaults: str | None, build: Build) -> FlaskClient:
    return _app(clock, defaults, build).test_client()


def _codes(client: FlaskClient, *paths: str) -> list[int]:
    return [client.get(path).status_code for path in paths]


def _api(fg: FreqGuard, *caps: Callable[[Blueprint], Blueprint]) -> Blueprint:
    """Blueprint ``api`` at ``/api``: capped first, its views ``/a`` and ``/b`` added after."""
    api = Blueprint("api", __name__, url_prefix="/api")
    for cap in caps:
        cap(api)

    @api.get("/a")
    def a() -> str:
        return "a"

    @api.get("/b")
    def b() -> str:
        return "b"

    return api


def test_a_blueprint_cap_counts_each_route_on_its_own(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        app.register_blueprint(_api(fg, fg.capped("2/minute")))
        _page(app)

    client = _client(clock, None, build)
    paths = ("/api/a", "/api/a", "/api/b", "/api/b", "/api/a", "/api/b")
    assert _codes(client, *paths) == [200, 200, 200, 200, 429, 429]
    assert _codes(client, *["/page"] * 5) == [200] * 5  # the app's own views: not capped


def test_a_shared_blueprint_cap_is_one_budget(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        app.register_blueprint(_api(fg, fg.capped("2/minute", shared=True)))

    client = _client(clock, None, build)
    assert _codes(client, "/api/a", "/api/b", "/api/a", "/api/b") == [200, 200, 429, 429]
    denied = client.get("/api/a")
    assert denied.json is not None
    assert denied.json["policy"] == "flask-blueprint.api"


def test_a_blueprint_cap_replaces_the_default_limits(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        app.register_blueprint(_api(fg, fg.capped("3/minute")))
        _page(app)

    client = _client(clock, "1/minute", build)
    assert _codes(client, *["/api/a"] * 4) == [200, 200, 200, 429]
    assert _codes(client, "/page", "/page") == [200, 429]  # the defaults hold outside it


def test_defaults_true_keeps_the_default_limits_in_the_same_hit(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        app.register_blueprint(_api(fg, fg.capped("2/hour", defaults=True)))

    client = _client(clock, "1/minute", build)
    assert _codes(client, "/api/a", "/api/a", "/api/a") == [200, 429, 429]  # the default
    clock.advance(61)
    assert client.get("/api/a").status_code == 200  # the blueprint's 2/hour had only one
    clock.advance(61)
    assert client.get("/api/a").status_code == 429  # now the blueprint's 2/hour denies


def test_a_denial_by_the_view_consumes_nothing_from_its_blueprint(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        api = Blueprint("api", __name__, url_prefix="/api")
        fg.capped("3/hour")(api)

        @api.post("/sms")
        @fg.capped("1/minute")
        def sms() -> str:
            return "sent"

        app.register_blueprint(api)

    client = _client(clock, None, build)
    assert [client.post("/api/sms").status_code for _ in range(3)] == [200, 429, 429]
    clock.advance(61)
    assert client.post("/api/sms").status_code == 200  # the blueprint counted only one
    clock.advance(61)
    assert client.post("/api/sms").status_code == 200
    clock.advance(61)
    denied = client.post("/api/sms")
    assert denied.status_code == 429  # now the blueprint's 3/hour denies
    assert denied.json is not None
    assert denied.json["violated_policies"] == ["bp.api.sl.3.3600s"]
    assert denied.json["policy"] == "flask.api.sms"


def test_a_denial_by_the_blueprint_consumes_nothing_from_the_view(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        api = Blueprint("api", __name__, url_prefix="/api")

        @api.post("/sms")
        @fg.capped("2/hour")
        def sms() -> str:
            return "sent"

        fg.capped("1/minute")(api)
        app.register_blueprint(api)

    client = _client(clock, None, build)
    assert [client.post("/api/sms").status_code for _ in range(3)] == [200, 429, 429]
    clock.advance(61)
    assert client.post("/api/sms").status_code == 200  # the view's 2/hour had only one
    clock.advance(61)
    assert client.post("/api/sms").status_code == 429


def _nested(outer: str | None, inner: str | None, defaults: bool = False) -> Build:
    """``/api`` (cap ``outer``) with ``/api/admin`` nested (cap ``inner``), a view each."""

    def build(app: Flask, fg: FreqGuard) -> None:
        api = Blueprint("api", __name__, url_prefix="/api")
        admin = Blueprint("admin", __name__, url_prefix="/admin")
        if outer:
            fg.capped(outer)(api)
        if inner:
            fg.capped(inner, defaults=defaults)(admin)

        @api.get("/")
        def index() -> str:
            return "index"

        @admin.get("/")
        def panel() -> str:
            return "panel"

        api.register_blueprint(admin)
        app.register_blueprint(api)

    return build


def test_a_nested_blueprint_takes_the_cap_of_the_one_around_it(clock: ManualClock) -> None:
    client = _client(clock, "100/minute", _nested("2/minute", None))
    assert _codes(client, *["/api/admin/"] * 3) == [200, 200, 429]
    assert _codes(client, *["/api/"] * 3) == [200, 200, 429]  # each route its own count


def test_a_nested_blueprints_cap_replaces_the_one_around_it(clock: ManualClock) -> None:
    client = _client(clock, None, _nested("1/minute", "3/minute"))
    assert _codes(client, *["/api/admin/"] * 4) == [200, 200, 200, 429]
    assert _codes(client, "/api/", "/api/") == [200, 429]


def test_a_nested_blueprints_cap_with_defaults_adds_to_the_one_around_it(
    clock: ManualClock,
) -> None:
    client = _client(clock, None, _nested("1/minute", "3/minute", defaults=True))
    assert _codes(client, *["/api/admin/"] * 2) == [200, 429]


def _exempt_api(app: Flask, fg: FreqGuard) -> None:
    """``/api`` exempt: ``/api/a``, ``/api/own`` (capped 1/minute), nested ``/api/free/``
    (uncapped) and ``/api/paid/`` (capped 2/minute); ``/page`` outside it."""
    api = Blueprint("api", __name__, url_prefix="/api")
    free = Blueprint("free", __name__, url_prefix="/free")
    paid = Blueprint("paid", __name__, url_prefix="/paid")
    fg.exempt(api)
    fg.capped("2/minute")(paid)

    @api.get("/a")
    def a() -> str:
        return "a"

    @api.get("/own")
    @fg.capped("1/minute")
    def own() -> str:
        return "own"

    for nested in (free, paid):
        nested.add_url_rule("/", "index", lambda: "nested")
        api.register_blueprint(nested)
    app.register_blueprint(api)
    _page(app)


def test_an_exempt_blueprint(clock: ManualClock) -> None:
    client = _client(clock, "1/minute", _exempt_api)
    assert _codes(client, "/api/a", "/api/a", "/api/free/", "/api/free/") == [200] * 4
    assert _codes(client, "/api/own", "/api/own") == [200, 429]  # its own cap holds
    assert _codes(client, *["/api/paid/"] * 3) == [200, 200, 429]  # a nested one's own cap
    assert _codes(client, "/page", "/page") == [200, 429]  # the defaults hold outside it


def test_an_exempt_view_in_a_capped_blueprint(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        api = Blueprint("api", __name__, url_prefix="/api")
        fg.capped("1/minute")(api)

        @api.get("/health")
        @fg.exempt
        def health() -> str:
            return "ok"

        @api.get("/own")
        @fg.exempt
        @fg.capped("2/minute")
        def own() -> str:
            return "own"

        app.register_blueprint(api)

    client = _client(clock, "1/minute", build)
    assert _codes(client, *["/api/health"] * 3) == [200] * 3
    assert _codes(client, *["/api/own"] * 3) == [200, 200, 429]  # its own cap only


def test_the_app_wide_switch_turns_blueprint_caps_off(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        app.register_blueprint(_api(fg, fg.capped("1/minute")))
        shared = Blueprint("shared", __name__, url_prefix="/shared")
        fg.capped("1/minute", shared=True)(shared)
        shared.add_url_rule("/", "index", lambda: "shared")
        app.register_blueprint(shared)

    client = _app(clock, None, build, FREQGUARD_ENABLED=False).test_client()
    response = client.get("/api/a")
    assert _codes(client, "/api/a", "/api/a", "/shared/", "/shared/") == [200] * 4
    assert not [name for name, _ in response.headers if name.lower().startswith("ratelimit")]


def test_one_freqguard_on_two_apps_caps_each_on_its_own() -> None:
    fg = FreqGuard()
    api = _api(fg, fg.capped("1/minute"))
    clients = []
    for _ in range(2):
        app = Flask(__name__)
        app.register_blueprint(api)
        fg.init_app(app)  # after the blueprint: either order works
        clients.append(app.test_client())
    one, two = clients
    assert _codes(one, "/api/a", "/api/a") == [200, 429]
    assert _codes(two, "/api/a", "/api/a") == [200, 429]  # capped too, on its own count


def test_a_blueprint_capped_after_it_is_registered(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        api = _api(fg)
        app.register_blueprint(api)
        fg.capped("1/minute")(api)  # before the first request: the routes are built then

    client = _client(clock, None, build)
    assert _codes(client, "/api/a", "/api/a") == [200, 429]


@pytest.mark.parametrize("shared", [False, True])
def test_a_blueprint_registered_twice_is_capped_twice_apart(
    clock: ManualClock, shared: bool
) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        api = _api(fg, fg.capped("1/minute", shared=shared))
        app.register_blueprint(api)
        app.register_blueprint(api, name="v2", url_prefix="/v2")

    client = _client(clock, None, build)
    assert _codes(client, "/api/a", "/v2/a", "/api/a", "/v2/a") == [200, 200, 429, 429]
    denied = client.get("/v2/a")
    assert denied.json is not None
    assert denied.json["policy"] == ("flask-blueprint.v2" if shared else "flask.v2.a")


def test_costs(clock: ManualClock) -> None:
    def build(app: Flask, fg: FreqGuard) -> None:
        api = Blueprint("api", __name__, url_prefix="/api")
        fg.capped("5/minute", cost=2)(api)
        api.add_url_rule("/a", "a", lambda: "a")

        @api.get("/bulk")
        @fg.capped("100/minute", cost=3)
        def bulk() -> str:
            return "bulk"

        app.register_blueprint(api)

    client = _client(clock, None, build)
    assert _codes(client, *["/api/a"] * 3) == [200, 200, 429]  # 2 + 2, then 6 > 5
    assert _codes(client, "/api/bulk", "/api/bulk") == [200, 429]  # the view's 3: 6 > 5
