"""A third review from Flask-Limiter's side: the habits that left a route capped other than
as written, without a word. ``limiter.init_app(app)`` after ``Limiter(..., app=app)`` (a
factory's habit; Flask-Limiter takes it once), a view cap whose ``methods=`` the route never
serves, a blueprint capped once the app has served requests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from flask import Blueprint, Flask

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.backends.base import SyncBackend
from freqguard.integrations.flask import FreqGuard


def _codes(app: Flask, path: str, n: int, method: str = "GET") -> list[int]:
    client = app.test_client()
    return [client.open(path, method=method).status_code for _ in range(n)]


def test_init_app_twice_on_one_app_is_refused_not_counted_twice(clock: ManualClock) -> None:
    """Each call registered the hooks again, so every request was hit twice: a
    ``4/minute`` route admitted 2 (Flask-Limiter admits 4)."""
    app = Flask(__name__)
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "4/minute"
    fg = FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    with pytest.raises(ConfigError, match=r"app 'tests.* is set up already by this FreqGuard"):
        fg.init_app(app)
    app.add_url_rule("/", "index", lambda: "index")
    assert _codes(app, "/", 5) == [200] * 4 + [429]


def test_a_second_freqguard_on_one_app_is_refused(clock: ManualClock) -> None:
    """The second replaced the first's state, and both hooks hit it: 4/minute admitted 2,
    and the first's view caps were decided on the second's guard."""
    app = Flask(__name__)
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "4/minute"
    FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    with pytest.raises(
        ConfigError, match="set up already by another FreqGuard: one FreqGuard an app"
    ):
        FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    app.add_url_rule("/", "index", lambda: "index")
    assert _codes(app, "/", 5) == [200] * 4 + [429]


def test_one_freqguard_still_serves_several_apps(clock: ManualClock) -> None:
    fg = FreqGuard(guard=Guard(MemoryBackend(clock)))
    apps = [Flask(f"app{n}") for n in range(2)]
    for app in apps:
        app.config["FREQGUARD_DEFAULT_LIMITS"] = "1/minute"
        app.add_url_rule("/", app.name, lambda: "index")  # one guard: endpoints apart
        fg.init_app(app)
    assert [_codes(app, "/", 2) for app in apps] == [[200, 429]] * 2


@pytest.mark.parametrize("place", ["under", "over"])
def test_a_cap_on_methods_its_route_never_serves_is_refused(place: str) -> None:
    """``@fg.capped("1/minute", methods=["POST"])`` on a GET route never counted a
    request: the route went uncapped, silently."""
    app = Flask(__name__)
    fg = FreqGuard(app)
    cap = fg.capped("1/minute", methods=["POST"])

    def login() -> str:
        return "in"

    if place == "under":
        app.get("/login")(cap(login))
    else:
        cap(app.get("/login")(login))
    with app.test_client() as http:  # checked at the first request: the routes known then
        response = http.get("/login")
    assert response.status_code == 500
    with pytest.raises(
        ConfigError, match=r"methods=\['POST'\]\) never counts .* route 'login' serves GET"
    ):
        FreqGuard(guard=Guard()).init_app(_with_view(cap, "/login"))


def _with_view(cap: object, path: str) -> Flask:
    app = Flask("other")
    view = cap(lambda: "in")  # type: ignore[operator]
    app.add_url_rule(path, "login", view, methods=["GET"])
    return app


def test_a_cap_on_some_methods_its_route_serves_holds() -> None:
    app = Flask(__name__)
    fg = FreqGuard(app)

    @app.route("/login", methods=["GET", "POST"])
    @fg.capped("1/minute", methods=["POST", "PUT"])  # PUT never comes: POST is capped
    def login() -> str:
        return "in"

    assert _codes(app, "/login", 2, "POST") == [200, 429]
    assert _codes(app, "/login", 2) == [200, 200]


def test_a_view_on_two_endpoints_is_checked_on_both() -> None:
    """One view on a GET endpoint and a POST one: its POST cap holds on the second."""
    app = Flask(__name__)
    fg = FreqGuard(app)
    view = fg.capped("1/minute", methods=["POST"])(lambda: "ok")
    app.add_url_rule("/read", "read", view, methods=["GET"])
    app.add_url_rule("/write", "write", view, methods=["POST"])
    assert _codes(app, "/write", 2, "POST") == [200, 429]
    assert _codes(app, "/read", 2) == [200, 200]


def test_a_blueprint_capped_after_the_first_request_is_refused(clock: ManualClock) -> None:
    """The routes are built at the first request and never again: a blueprint capped (or
    exempt) later went on as before, uncapped, silently. Refused as Flask refuses a route
    added then."""
    app = Flask(__name__)
    fg = FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    api, other = Blueprint("api", __name__, url_prefix="/api"), Blueprint("other", __name__)
    api.add_url_rule("/users", "users", lambda: "[]")
    app.register_blueprint(api)
    app.add_url_rule("/", "index", lambda: "index")
    assert _codes(app, "/", 1) == [200]
    with pytest.raises(ConfigError, match=r"blueprint 'api' is registered on app 'tests.*, which"):
        fg.capped("1/minute")(api)
    with pytest.raises(ConfigError, match="has served requests already"):
        fg.exempt(api)
    fg.capped("1/minute")(other)  # registered on no app that has served: as before
    assert _codes(app, "/api/users", 2) == [200, 200]


def test_a_route_admits_exactly_its_rate_under_many_threads(
    backend: SyncBackend, clock: ManualClock
) -> None:
    """``@fg.capped("5/minute;100/day")`` hit by 8 threads at once admits exactly 5 in a
    minute, and 5 more the next (the day's rule holding them all), on every store."""
    app = Flask(__name__)
    fg = FreqGuard(app, guard=Guard(backend, clock=clock))

    @app.get("/sms")
    @fg.capped("5/minute;100/day")
    def sms() -> str:
        return "sent"

    def burst() -> list[int]:
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(lambda _: app.test_client().get("/sms").status_code, range(40)))

    first = burst()
    clock.advance(60)
    assert (first.count(200), burst().count(200)) == (5, 5)
