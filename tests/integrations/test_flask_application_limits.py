"""``FREQGUARD_APPLICATION_LIMITS``: one budget for the whole Flask app (Flask-Limiter's
``application_limits``), exempt views, exempt blueprints and static files left out; a
refusal by it gives back what the route's own limits took (docs/integrations.md)."""

from __future__ import annotations

import pytest
from flask import Blueprint, Flask

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Rule
from freqguard.integrations.flask import FreqGuard


def _page() -> str:
    return "page"


def _app(clock: ManualClock, **config: object) -> tuple[Flask, FreqGuard, Guard]:
    app = Flask(__name__, static_folder=None)
    app.config.update(config)
    guard = Guard(MemoryBackend(clock))
    return app, FreqGuard(app, guard=guard), guard


def test_every_route_shares_one_budget(clock: ManualClock) -> None:
    app, _, _ = _app(clock, FREQGUARD_APPLICATION_LIMITS="3/hour")
    for name in ("a", "b", "c"):
        app.add_url_rule(f"/{name}", name, _page)
    client = app.test_client()
    codes = [client.get(path).status_code for path in ("/a", "/b", "/c", "/a")]
    assert codes == [200, 200, 200, 429]


def test_an_exempt_blueprint_and_its_nested_ones_are_left_out(clock: ManualClock) -> None:
    app, fg, _ = _app(clock, FREQGUARD_APPLICATION_LIMITS="1/hour")
    outer, inner = Blueprint("outer", __name__), Blueprint("inner", __name__)
    inner.add_url_rule("/x", "x", _page)
    outer.register_blueprint(inner, url_prefix="/in")
    fg.exempt(outer)
    app.register_blueprint(outer, url_prefix="/out")
    app.add_url_rule("/a", "a", _page)
    client = app.test_client()
    codes = [client.get(path).status_code for path in ("/out/in/x", "/out/in/x", "/a", "/a")]
    assert codes == [200, 200, 200, 429]


def test_static_files_are_left_out(clock: ManualClock, tmp_path: object) -> None:
    app = Flask(__name__, static_folder=str(tmp_path), static_url_path="/static")
    (tmp_path / "s.txt").write_text("s")  # type: ignore[operator]
    app.config["FREQGUARD_APPLICATION_LIMITS"] = "1/hour"
    FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    client = app.test_client()
    codes = []
    for _ in range(3):
        with client.get("/static/s.txt") as response:  # a file's body: closed
            codes.append(response.status_code)
    assert codes == [200] * 3


def test_a_refusal_by_the_app_gives_back_the_routes_hit(clock: ManualClock) -> None:
    """The route's default limit (2/hour) and the app's (1/hour): the second request is
    refused by the app's budget, and the route's hit it took is given back."""
    app, _, guard = _app(
        clock, FREQGUARD_APPLICATION_LIMITS="1/hour", FREQGUARD_DEFAULT_LIMITS="2/hour"
    )
    app.add_url_rule("/a", "a", _page)
    client = app.test_client()
    assert [client.get("/a").status_code for _ in range(3)] == [200, 429, 429]
    assert guard.peek("flask.a", client="127.0.0.1").remaining == 1


def test_the_headers_tell_the_budget_nearest_exhaustion(clock: ManualClock) -> None:
    app, _, _ = _app(
        clock, FREQGUARD_APPLICATION_LIMITS="100/hour", FREQGUARD_DEFAULT_LIMITS="2/hour"
    )
    app.add_url_rule("/a", "a", _page)
    response = app.test_client().get("/a")
    assert response.headers["RateLimit"] == '"default.sl.2.3600s";r=1;t=3600'
    assert "app.sl.100.3600s" in response.headers["RateLimit-Policy"]


@pytest.mark.parametrize("setting", ["FREQGUARD_APPLICATION_LIMITS", "FREQGUARD_DEFAULT_LIMITS"])
@pytest.mark.parametrize(
    ("given", "named"),
    [
        ("3 a fortnight", "cannot parse rate"),
        ([Rule("3/hour", by="user")], "user"),
        (42, "42"),
    ],
)
def test_a_bad_setting_fails_init_app_naming_it(
    clock: ManualClock, given: object, named: str, setting: str
) -> None:
    """A rate that does not parse named no setting (FREQGUARD_DEFAULT_LIMITS's too)."""
    app = Flask(__name__)
    app.config[setting] = given
    with pytest.raises(ConfigError, match=named) as found:
        FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    assert setting in str(found.value)


def test_a_misspelt_setting_names_the_one_meant(clock: ManualClock) -> None:
    app = Flask(__name__)
    app.config["FREQGUARD_APPLICATION_LIMIT"] = "1/hour"
    with pytest.raises(ConfigError, match="did you mean FREQGUARD_APPLICATION_LIMITS"):
        FreqGuard(app, guard=Guard(MemoryBackend(clock)))
