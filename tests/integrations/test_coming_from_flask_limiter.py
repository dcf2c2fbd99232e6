"""docs/coming-from/flask-limiter.md, row by row: Flask-Limiter (where installed: freqguard
does not depend on it) beside freqguard's Flask extension (slowapi's rows:
``test_coming_from_slowapi.py``), on one pinned clock (limits' memory storage, which both use, reads
``time.time``, patched here), the outcomes equal or different as the page says."""

from __future__ import annotations

import importlib.util
import logging
import re
import types
from typing import Any

import limits.storage.memory
import pytest
from flask import Flask, Response, jsonify, make_response, request

from freqguard import (
    CapExceeded,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Rule,
    TierRates,
)
from freqguard.integrations._request import RequestInfo
from freqguard.integrations.flask import FreqGuard, SkipRequest, client_ip

START = 1_700_000_000.0
HAS_FLASK_LIMITER = importlib.util.find_spec("flask_limiter") is not None


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    manual = ManualClock(START)
    monkeypatch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=manual.now))
    return manual


def _theirs_too() -> None:
    """Freqguard's side has run; Flask-Limiter's runs where it is installed."""
    if not HAS_FLASK_LIMITER:
        pytest.skip("Flask-Limiter is not installed: freqguard's side ran alone")


def _flask_app(
    clock: ManualClock, config: dict[str, Any], routes: dict[str, Any]
) -> tuple[Flask, FreqGuard]:
    app = Flask("ours")
    app.config.update(config)
    fg = FreqGuard(guard=Guard(MemoryBackend(clock)))
    for path, wrap in routes.items():
        view = wrap(fg)(lambda: "ok")
        app.add_url_rule(path, path.strip("/"), view)
    fg.init_app(app)
    return app, fg


def _limiter_app(limits_given: dict[str, Any], routes: dict[str, Any]) -> Flask:
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    app = Flask("theirs")
    app.config.update(limits_given.pop("config", {}))
    limiter = Limiter(get_remote_address, app=app, storage_uri="memory://", **limits_given)
    for path, wrap in routes.items():
        app.add_url_rule(path, path.strip("/"), wrap(limiter)(lambda: "ok"))
    return app


def _codes(app: Flask, path: str, times: int) -> list[int]:
    client = app.test_client()
    return [client.get(path).status_code for _ in range(times)]


def _plain(fg: Any) -> Any:
    return lambda view: view


def test_default_limits(clock: ManualClock) -> None:
    ours, _ = _flask_app(
        clock, {"FREQGUARD_DEFAULT_LIMITS": "2/minute"}, {"/a": _plain, "/b": _plain}
    )
    assert _codes(ours, "/a", 3) == _codes(ours, "/b", 3) == [200, 200, 429]
    _theirs_too()
    theirs = _limiter_app({"default_limits": ["2/minute"]}, {"/a": _plain, "/b": _plain})
    assert _codes(theirs, "/a", 3) == _codes(theirs, "/b", 3) == [200, 200, 429]


IPV6 = ["2001:db8::1", "2001:db8::2", "2001:db8:0:1::1"]  # two of one /64, one of another


def _from(app: Flask, addresses: list[str]) -> list[int]:
    client = app.test_client()
    return [client.get("/a", environ_base={"REMOTE_ADDR": a}).status_code for a in addresses]


def test_ipv6_clients_are_keyed_by_their_64_prefix(clock: ManualClock) -> None:
    """The default key groups an IPv6 client's /64 (one host picks its addresses from one);
    get_remote_address keys the exact address. ``key=client_ip(ipv6_prefix=128)`` keys it
    as there."""
    ours, _ = _flask_app(clock, {"FREQGUARD_DEFAULT_LIMITS": "1/minute"}, {"/a": _plain})
    assert _from(ours, IPV6) == [200, 429, 200]
    exact = Flask("exact")
    exact.config["FREQGUARD_DEFAULT_LIMITS"] = "1/minute"
    exact.add_url_rule("/a", "a", lambda: "ok")
    FreqGuard(exact, guard=Guard(MemoryBackend(clock)), key=client_ip(ipv6_prefix=128))
    assert _from(exact, IPV6) == [200, 200, 200]
    _theirs_too()
    theirs = _limiter_app({"default_limits": ["1/minute"]}, {"/a": _plain})
    assert _from(theirs, IPV6) == [200, 200, 200]


def test_a_route_limit(clock: ManualClock) -> None:
    routes_ours = {"/r": lambda fg: fg.capped("3/minute")}
    ours, _ = _flask_app(clock, {"FREQGUARD_DEFAULT_LIMITS": "1/minute"}, routes_ours)
    assert _codes(ours, "/r", 2) == [200, 429]  # the default 1/minute holds beside it
    _theirs_too()
    theirs = _limiter_app(
        {"default_limits": ["1/minute"]}, {"/r": lambda lim: lim.limit("3/minute")}
    )
    assert _codes(theirs, "/r", 4) == [200, 200, 200, 429]  # the route's replaces it


def test_cost(clock: ManualClock) -> None:
    """A request's cost is one hit's, charged to every cap it takes, the default limits
    too; Flask-Limiter charges its defaults their own cost (1, ``RATELIMIT_DEFAULTS_COST``)
    when they hold beside a route limit. ``@fg.exempt`` over the cap leaves the defaults
    out, as Flask-Limiter's ``override_defaults=True`` (its default) does."""
    config = {"FREQGUARD_DEFAULT_LIMITS": "4/minute"}
    beside = {"/r": lambda fg: fg.capped("10/minute", cost=2)}
    ours, _ = _flask_app(clock, config, beside)
    assert _codes(ours, "/r", 3) == [200, 200, 429]  # 4/minute at 2 a request
    alone = {"/r": lambda fg: lambda view: fg.exempt(fg.capped("10/minute", cost=2)(view))}
    ours, _ = _flask_app(clock, config, alone)
    assert _codes(ours, "/r", 6) == [200] * 5 + [429]
    _theirs_too()

    def theirs_cost(override: bool) -> Any:
        return lambda lim: lim.limit("10/minute", cost=2, override_defaults=override)

    for override, admitted in ((False, 4), (True, 5)):
        routes = {"/r": theirs_cost(override)}
        theirs = _limiter_app({"default_limits": ["4/minute"]}, routes)
        assert _codes(theirs, "/r", 6) == [200] * admitted + [429] * (6 - admitted)


def test_per_method(clock: ManualClock) -> None:
    """The page's key for a budget per method, as written (the hint named a ``key`` no
    module had: a new user's paste failed): one view of GET and POST, one budget each."""
    from freqguard.integrations.flask import remote_address

    key = lambda request: {**remote_address(request), "method": request.method}  # noqa: E731
    ours = Flask("ours")
    fg = FreqGuard(ours, guard=Guard(MemoryBackend(clock)))
    ours.add_url_rule(
        "/m", "m", fg.capped("1/minute", key=key)(lambda: "ok"), methods=["GET", "POST"]
    )
    if HAS_FLASK_LIMITER:
        from flask_limiter import Limiter
        from flask_limiter.util import get_remote_address

        theirs = Flask("theirs")
        limiter = Limiter(get_remote_address, app=theirs, storage_uri="memory://")
        view = limiter.limit("1/minute", per_method=True)(lambda: "ok")
        theirs.add_url_rule("/m", "m", view, methods=["GET", "POST"])
    for app in (ours, theirs) if HAS_FLASK_LIMITER else (ours,):
        client = app.test_client()
        codes = [client.get("/m"), client.post("/m"), client.get("/m"), client.post("/m")]
        assert [c.status_code for c in codes] == [200, 200, 429, 429]


def test_exempt(clock: ManualClock) -> None:
    ours, _ = _flask_app(
        clock, {"FREQGUARD_DEFAULT_LIMITS": "1/minute"}, {"/e": lambda fg: fg.exempt}
    )
    assert _codes(ours, "/e", 3) == [200] * 3
    _theirs_too()
    theirs = _limiter_app({"default_limits": ["1/minute"]}, {"/e": lambda lim: lim.exempt})
    assert _codes(theirs, "/e", 3) == [200] * 3


def test_key_func(clock: ManualClock) -> None:
    """Their key function reads ``flask.request`` and takes nothing; ours takes the request
    (one key function for every framework), and one that takes nothing is refused at once."""
    by_user = {"/k": lambda fg: fg.capped("1/minute", key=lambda r: r.headers.get("x-user"))}
    ours, _ = _flask_app(clock, {}, by_user)
    client = ours.test_client()
    codes = [client.get("/k", headers={"X-User": user}).status_code for user in "aab"]
    assert codes == [200, 429, 200]
    with pytest.raises(ConfigError, match="Flask-Limiter's key_func takes none"):
        FreqGuard(key=lambda: request.headers.get("x-user"))  # type: ignore[arg-type, misc]
    _theirs_too()
    from flask_limiter import Limiter

    theirs = Flask("theirs")
    limiter = Limiter(
        lambda: request.headers.get("x-user", ""), app=theirs, storage_uri="memory://"
    )
    theirs.add_url_rule("/k", "k", limiter.limit("1/minute")(lambda: "ok"))
    client = theirs.test_client()
    codes = [client.get("/k", headers={"X-User": user}).status_code for user in "aab"]
    assert codes == [200, 429, 200]


def _view() -> str:
    return "ok"


def _post_and_get(app: Flask, view: Any) -> list[int]:
    app.add_url_rule("/p", "p", view, methods=["GET", "POST"])
    client = app.test_client()
    return [client.get("/p").status_code for _ in range(3)] + [
        client.post("/p").status_code for _ in range(2)
    ]


def test_methods(clock: ManualClock) -> None:
    """A cap of some methods only (found missing by a new user's first hour): the others
    pass uncounted; GET brings HEAD."""
    app = Flask("ours")
    fg = FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    ours = fg.capped("1/minute", methods=["POST"])(_view)
    assert _post_and_get(app, ours) == [200, 200, 200, 200, 429]
    with pytest.raises(ConfigError, match="methods must"):
        fg.capped("1/minute", methods="POST")
    _theirs_too()
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    theirs = Flask("theirs")
    limiter = Limiter(get_remote_address, app=theirs, storage_uri="memory://")
    view = limiter.limit("1/minute", methods=["POST"])(_view)
    assert _post_and_get(theirs, view) == [200, 200, 200, 200, 429]


def _heads_then_gets(app: Flask, view: Any) -> list[int]:
    app.add_url_rule("/g", "g", view, methods=["GET"])
    client = app.test_client()
    return [client.head("/g").status_code for _ in range(2)] + [client.get("/g").status_code]


def test_head_under_get(clock: ManualClock) -> None:
    """A cap of GET counts a HEAD here (Flask runs the GET view for it); Flask-Limiter's
    lets it pass uncounted (a review of the coming-from pages)."""
    app = Flask("ours")
    fg = FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    assert _heads_then_gets(app, fg.capped("1/minute", methods=["GET"])(_view)) == [
        200,
        429,
        429,
    ]
    _theirs_too()
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    theirs = Flask("theirs")
    limiter = Limiter(get_remote_address, app=theirs, storage_uri="memory://")
    view = limiter.limit("1/minute", methods=["GET"])(_view)
    assert _heads_then_gets(theirs, view) == [200, 200, 200]


def test_exempt_when(clock: ManualClock) -> None:
    """Their ``exempt_when``/``request_filter``; ours, a key function that raises
    SkipRequest: the request goes uncapped by that cap (found missing by a new user's first
    hour)."""

    def unless_admin(request: RequestInfo) -> dict[str, object]:
        if request.headers.get("x-admin") == "1":
            raise SkipRequest("admin")
        return {"client": "one"}

    ours, _ = _flask_app(clock, {}, {"/x": lambda fg: fg.capped("1/minute", key=unless_admin)})
    client = ours.test_client()
    admin = [client.get("/x", headers={"X-Admin": "1"}).status_code for _ in range(3)]
    assert admin + [client.get("/x").status_code for _ in range(2)] == [200] * 4 + [429]
    _theirs_too()
    from flask_limiter import Limiter

    theirs = Flask("theirs")
    limiter = Limiter(lambda: "one", app=theirs, storage_uri="memory://")
    exempt = limiter.limit("1/minute", exempt_when=lambda: request.headers.get("X-Admin") == "1")
    theirs.add_url_rule("/x", "x", exempt(_view))
    client = theirs.test_client()
    admin = [client.get("/x", headers={"X-Admin": "1"}).status_code for _ in range(3)]
    assert admin + [client.get("/x").status_code for _ in range(2)] == [200] * 4 + [429]


def test_dynamic_limit(clock: ManualClock) -> None:
    """Their callable limit (a rate per request, e.g. by plan); ours, a tier: the rate a
    value of the request picks (``rate_for=TierRates``)."""
    pro = {"pro": "3/minute"}

    def by_user(request: RequestInfo) -> dict[str, object]:
        return {"user": request.headers.get("x-user", ""), "plan": request.headers.get("x-plan")}

    rule = Rule("1/minute", by="user", name="per-user", rate_for=TierRates("plan", pro))
    ours, _ = _flask_app(clock, {}, {"/d": lambda fg: fg.capped(rule, key=by_user)})
    client = ours.test_client()
    free = [client.get("/d", headers={"X-User": "a", "X-Plan": "free"}).status_code for _ in "12"]
    paid = [client.get("/d", headers={"X-User": "b", "X-Plan": "pro"}).status_code for _ in "1234"]
    assert (free, paid) == ([200, 429], [200, 200, 200, 429])
    _theirs_too()
    from flask_limiter import Limiter

    theirs = Flask("theirs")
    limiter = Limiter(
        lambda: request.headers.get("X-User", ""), app=theirs, storage_uri="memory://"
    )
    dynamic = limiter.limit(lambda: pro.get(request.headers.get("X-Plan", ""), "1/minute"))
    theirs.add_url_rule("/d", "d", dynamic(_view))
    client = theirs.test_client()
    free = [client.get("/d", headers={"X-User": "a", "X-Plan": "free"}).status_code for _ in "12"]
    paid = [client.get("/d", headers={"X-User": "b", "X-Plan": "pro"}).status_code for _ in "1234"]
    assert (free, paid) == ([200, 429], [200, 200, 200, 429])


def _logins(app: Flask) -> list[int]:
    """Three good logins, then bad ones: only the bad ones are to count."""
    client = app.test_client()
    good = [client.post("/login", data={"password": "right"}).status_code for _ in range(3)]
    return good + [client.post("/login", data={"password": "wrong"}).status_code for _ in "123"]


def _login() -> tuple[str, int]:
    return ("ok", 200) if request.form.get("password") == "right" else ("no", 401)


def test_deduct_when(clock: ManualClock) -> None:
    """Their ``deduct_when``: a response the predicate refuses counts nothing (failed
    logins only); ours, the hit taken back exactly (``refund``) once the response says so
    (found missing by a new user's first hour)."""
    app = Flask("ours")
    fg = FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    failed = fg.capped("2/minute", deduct_when=lambda response: response.status_code == 401)
    app.add_url_rule("/login", "login", failed(_login), methods=["POST"])
    assert _logins(app) == [200, 200, 200, 401, 401, 429]
    _theirs_too()
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    theirs = Flask("theirs")
    limiter = Limiter(get_remote_address, app=theirs, storage_uri="memory://")
    counted = limiter.limit("2/minute", deduct_when=lambda response: response.status_code == 401)
    theirs.add_url_rule("/login", "login", counted(_login), methods=["POST"])
    assert _logins(theirs) == [200, 200, 200, 401, 401, 429]


def test_shared_limit(clock: ManualClock) -> None:
    shared = {p: (lambda fg: fg.capped("2/minute", name="s")) for p in ("/x", "/y")}
    ours, _ = _flask_app(clock, {}, shared)
    assert _codes(ours, "/x", 1) + _codes(ours, "/y", 2) == [200, 200, 429]
    _theirs_too()
    theirs_routes = {p: (lambda lim: lim.shared_limit("2/minute", scope="s")) for p in ("/x", "/y")}
    theirs = _limiter_app({}, theirs_routes)
    assert _codes(theirs, "/x", 1) + _codes(theirs, "/y", 2) == [200, 200, 429]


def test_switched_off(clock: ManualClock) -> None:
    config = {"FREQGUARD_DEFAULT_LIMITS": "1/minute", "FREQGUARD_ENABLED": False}
    ours, _ = _flask_app(clock, config, {"/a": _plain})
    assert _codes(ours, "/a", 3) == [200] * 3
    _theirs_too()
    theirs = _limiter_app(
        {"default_limits": ["1/minute"], "config": {"RATELIMIT_ENABLED": False}}, {"/a": _plain}
    )
    assert _codes(theirs, "/a", 3) == [200] * 3


def test_headers(clock: ManualClock) -> None:
    config = {"FREQGUARD_DEFAULT_LIMITS": "2/minute", "FREQGUARD_HEADERS": "x-ratelimit"}
    ours, _ = _flask_app(clock, config, {"/a": _plain})
    client = ours.test_client()
    first, _, refused = (client.get("/a") for _ in range(3))
    assert (first.headers["X-RateLimit-Limit"], first.headers["X-RateLimit-Remaining"]) == (
        "2",
        "1",
    )
    assert first.headers["X-RateLimit-Reset"] == "60"  # seconds from now
    assert refused.headers["Content-Type"] == "application/problem+json"
    _theirs_too()
    theirs = _limiter_app({"default_limits": ["2/minute"], "headers_enabled": True}, {"/a": _plain})
    client = theirs.test_client()
    first, _, refused = (client.get("/a") for _ in range(3))
    assert (first.headers["X-RateLimit-Limit"], first.headers["X-RateLimit-Remaining"]) == (
        "2",
        "1",
    )
    assert int(first.headers["X-RateLimit-Reset"]) > START  # a Unix time
    assert refused.headers["Content-Type"].startswith("text/html")


def _breached(app: Flask) -> Any:
    client = app.test_client()
    client.get("/b")
    return client.get("/b")


@pytest.mark.parametrize("order", ["handler first", "extension first"])
def test_on_breach(clock: ManualClock, order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Their ``on_breach`` callback, whose Response replaces the 429; ours, the app's own
    handler for CapExceeded, which carries the decision. Flask keeps one handler a class:
    one registered before ``FreqGuard(app)`` was replaced by the extension's, silently
    (found porting ``on_breach``; seen failing first)."""

    def breach(error: CapExceeded) -> tuple[Response, int]:
        return jsonify(error="slow down", retry_after=error.decision.retry_after), 429

    app = Flask("ours")
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "1/minute"
    if order == "handler first":
        app.register_error_handler(CapExceeded, breach)
    FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    if order == "extension first":
        app.register_error_handler(CapExceeded, breach)
    app.add_url_rule("/b", "b", _view)
    refused = _breached(app)
    assert (refused.status_code, refused.json) == (429, {"error": "slow down", "retry_after": 60})
    assert refused.headers["Retry-After"] == "60"  # the extension's headers, on the user's
    assert refused.headers["RateLimit"] == '"default.sl.1.60s";r=0;t=60'
    _theirs_too()
    import flask_limiter._extension
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    # its Retry-After is the window's reset (on the pinned clock) less its own time.time()
    monkeypatch.setattr(flask_limiter._extension, "time", types.SimpleNamespace(time=clock.now))

    def their_breach(limit: Any) -> Response:
        return make_response(jsonify(error="slow down", retry_after=60), 429)

    theirs = Flask("theirs")
    Limiter(
        get_remote_address,
        app=theirs,
        storage_uri="memory://",
        default_limits=["1/minute"],
        headers_enabled=True,
        on_breach=their_breach,
    )
    theirs.add_url_rule("/b", "b", _view)
    refused = _breached(theirs)
    assert (refused.status_code, refused.json) == (429, {"error": "slow down", "retry_after": 60})
    assert refused.headers["Retry-After"] == "61"  # its reset_at: the window's end, plus 1
    assert refused.headers["X-RateLimit-Remaining"] == "0"


def test_a_429_handler(clock: ManualClock, caplog: pytest.LogCaptureFixture) -> None:
    """Their denial is an HTTP 429 error, so ``@app.errorhandler(429)`` answers it; ours is
    CapExceeded, which that handler never sees: freqguard answers, and the first request
    logs a warning naming ``@app.errorhandler(CapExceeded)``."""

    def teapot(error: Exception) -> tuple[str, int]:
        return "mine", 418

    app = Flask("ours")
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "1/minute"
    app.register_error_handler(429, teapot)
    FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    app.add_url_rule("/b", "b", _view)
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        assert _breached(app).status_code == 429
    assert "@app.errorhandler(CapExceeded)" in caplog.text
    _theirs_too()
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    theirs = Flask("theirs")
    theirs.register_error_handler(429, teapot)
    Limiter(get_remote_address, app=theirs, storage_uri="memory://", default_limits=["1/minute"])
    theirs.add_url_rule("/b", "b", _view)
    refused = _breached(theirs)
    assert (refused.status_code, refused.text) == (418, "mine")


def test_a_methods_cap_costs_nothing_to_the_other_methods(clock: ManualClock) -> None:
    """Review: a view's cap of POST only, costing 3, passes a GET "uncounted", yet the GET
    was charged 3 against the default limits, as if the cap's cost were the route's: the
    second GET under "3/minute" was refused."""
    app = Flask("ours")
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "3/minute"
    fg = FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    view = fg.capped("10/minute", methods=["POST"], cost=3)(_view)
    app.add_url_rule("/p", "p", view, methods=["GET", "POST"])
    client = app.test_client()
    assert [client.get("/p").status_code for _ in range(3)] == [200, 200, 200]


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [
        ({"per_method": True}, "{**remote_address(request), 'method': request.method}"),
        ({"key_func": lambda: "u"}, "key= here, a function of the request"),
        ({"exempt_when": lambda: True}, "raise SkipRequest in the key function"),
        ({"override_defaults": False}, "a view's caps go beside the default limits"),
        ({"error_message": "slow down"}, "@app.errorhandler(CapExceeded)"),
        ({"on_breach": print}, "@app.errorhandler(CapExceeded)"),
        ({"scope": "s"}, "name= here"),
    ],
)
def test_flask_limiters_arguments_are_refused_naming_ours(
    theirs: dict[str, object], ours: str
) -> None:
    """A Flask-Limiter user's ``limit(...)`` arguments (``per_method=True`` was a
    TypeError a new user's first hour met): a ConfigError naming freqguard's way."""
    [(name, _)] = theirs.items()
    with pytest.raises(ConfigError, match=re.escape(f"Flask-Limiter's {name}=")) as found:
        FreqGuard().capped("1/minute", **theirs)  # type: ignore[arg-type]
    assert ours in str(found.value)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        FreqGuard().capped("1/minute", bogus=1)  # type: ignore[arg-type]
