"""A Flask-Limiter user porting an app by docs/coming-from/flask-limiter.md and
docs/integrations.md (a second review's run): each test is an idiom that did not give what
the pages said, or failed without naming freqguard's way, a failing test first.
Flask-Limiter's outcomes quoted here were seen running it (4.1) beside freqguard on one
pinned clock, and are run again where it is installed."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path
from typing import Any

import limits.storage.memory
import pytest
from flask import Blueprint, Flask, request

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations.flask import FreqGuard
from tests.conftest import START

HAS_FLASK_LIMITER = importlib.util.find_spec("flask_limiter") is not None
PAGE = Path(__file__).resolve().parents[2] / "docs" / "coming-from" / "flask-limiter.md"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """One time for both: limits' memory storage and Flask-Limiter's headers read
    ``time.time``, patched here; freqguard's guard is pinned to it."""
    manual = ManualClock(START)
    now = types.SimpleNamespace(time=manual.now)
    monkeypatch.setattr(limits.storage.memory, "time", now)
    if HAS_FLASK_LIMITER:
        import flask_limiter._extension

        monkeypatch.setattr(flask_limiter._extension, "time", now)
    return manual


def _ours(clock: ManualClock, **config: object) -> tuple[Flask, FreqGuard]:
    app = Flask("ours")
    app.config.update(config)
    return app, FreqGuard(app, guard=Guard(MemoryBackend(clock)))


def _theirs(**given: Any) -> tuple[Flask, Any]:
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    app = Flask("theirs")
    return app, Limiter(get_remote_address, app=app, storage_uri="memory://", **given)


def _row(start: str) -> str:
    [row] = [line for line in PAGE.read_text().splitlines() if line.startswith(start)]
    return row


# -- deduct_when: the headers of a response that is not counted ------------------------------


def _login() -> tuple[str, int]:
    return ("ok", 200) if request.form.get("password") == "right" else ("no", 401)


#: good, good, bad, good, bad, bad, good: only the bad ones count
LOGINS = ["right", "right", "wrong", "right", "wrong", "wrong", "right"]
#: Flask-Limiter 4.1's X-RateLimit-Remaining for LOGINS under "3/minute" (seen running it):
#: the budget as it stands once the response is counted or not
THEIR_REMAINING = ["3", "3", "2", "2", "1", "0", "0"]


def _remaining(app: Flask) -> list[str | None]:
    client = app.test_client()
    return [
        client.post("/login", data={"password": p}).headers.get("X-RateLimit-Remaining")
        for p in LOGINS
    ]


def test_a_response_deduct_when_does_not_count_tells_the_budget_as_it_stands(
    clock: ManualClock,
) -> None:
    """flask-limiter.md's ``deduct_when`` row says "the same answers", and its
    ``headers_enabled=True`` row "the same limit and remaining for one limit". A login
    form capped ``"3/minute"``, ``deduct_when=lambda response: response.status_code ==
    401`` (failed logins only), headers ``"x-ratelimit"``. Flask-Limiter counts after the
    response and tells the budget as it then stands: a good login says 3 remaining. Here
    the hit is taken before the view and refunded after it, and the headers were the
    hit's, before the refund: every good login said one less than was left (2, 2, 1, 0:
    a client reading them backs off from a budget it has not spent, and a good login
    after the third bad one says 0 where the next bad login is still refused, the next
    good one still admitted). Expected: the budget once the refund is made, as there."""
    app, fg = _ours(clock, FREQGUARD_HEADERS="x-ratelimit")
    failed = fg.capped("3/minute", deduct_when=lambda response: response.status_code == 401)
    app.add_url_rule("/login", "login", failed(_login), methods=["POST"])
    ours = _remaining(app)
    if HAS_FLASK_LIMITER:
        theirs_app, limiter = _theirs(headers_enabled=True)
        counted = limiter.limit("3/minute", deduct_when=lambda r: r.status_code == 401)
        theirs_app.add_url_rule("/login", "login", counted(_login), methods=["POST"])
        assert _remaining(theirs_app) == THEIR_REMAINING
    assert ours == THEIR_REMAINING


def test_a_refunded_responses_ietf_header_says_nothing_is_held(clock: ManualClock) -> None:
    """The same in the default profile: a good login, refunded, on a fresh budget of
    ``"3/minute"`` said ``r=2;t=60`` (one held, freeing in a minute); nothing is held, so
    ``r=3;t=0``, as ``peek`` says for that key."""
    app, fg = _ours(clock)
    failed = fg.capped("3/minute", deduct_when=lambda response: response.status_code == 401)
    app.add_url_rule("/login", "login", failed(_login), methods=["POST"])
    good = app.test_client().post("/login", data={"password": "right"})
    assert good.status_code == 200
    assert good.headers["RateLimit"] == '"sl.3.60s";r=3;t=0'


# -- @fg.exempt on a view of a capped blueprint ----------------------------------------------


def _exempt_view() -> str:
    return "ok"


def _blueprint_app(ours: bool, clock: ManualClock) -> Flask:
    """``default_limits=["5/minute"]``, a blueprint capped ``"2/minute"``, and one of its
    views exempt (a health check under /api)."""
    if ours:
        app, fg = _ours(clock, FREQGUARD_DEFAULT_LIMITS="5/minute")
        cap, exempt = fg.capped, fg.exempt
    else:
        app, limiter = _theirs(default_limits=["5/minute"])
        cap, exempt = limiter.limit, limiter.exempt
    api = Blueprint("api", __name__, url_prefix="/api")
    cap("2/minute")(api)
    api.add_url_rule("/health", "health", exempt(_exempt_view))
    app.register_blueprint(api)
    return app


#: Flask-Limiter 4.1 (seen running it): its exempt view still takes its blueprint's limit
THEIR_EXEMPT_IN_BLUEPRINT = [200, 200, 429]


def test_an_exempt_view_of_a_capped_blueprint(clock: ManualClock) -> None:
    """flask-limiter.md's ``@limiter.exempt`` row: "the same: no default limits". In a
    blueprint capped ``"2/minute"`` (``limiter.limit("2/minute")(api)``, which the
    integrations page ports as ``fg.capped("2/minute")(api)``), Flask-Limiter's
    ``@limiter.exempt`` view leaves out the application and default limits only (its
    ``flags`` default, ``ExemptionScope.APPLICATION | DEFAULT | META``): the blueprint's
    limit still holds, the third request is a 429. ``@fg.exempt`` also leaves out the
    caps of the blueprints around it (integrations.md, Blueprints: "Exempt"), so the
    ported view is not capped at all, and the row says "the same". Expected: the row says
    how it differs, so that a ported exempt view under a capped blueprint is not left
    uncapped unawares."""
    app = _blueprint_app(ours=True, clock=clock)
    client = app.test_client()
    ours = [client.get("/api/health").status_code for _ in range(3)]
    if HAS_FLASK_LIMITER:
        theirs_app = _blueprint_app(ours=False, clock=clock)
        client = theirs_app.test_client()
        theirs = [client.get("/api/health").status_code for _ in range(3)]
        assert theirs == THEIR_EXEMPT_IN_BLUEPRINT
    assert ours == [200, 200, 200]  # freqguard's, as integrations.md says
    row = _row("| `@limiter.exempt`")
    assert "blueprint" in row.lower(), row


# -- what the page leaves out, refused naming freqguard's way --------------------------------


def test_a_limit_as_a_context_manager_names_ours(clock: ManualClock) -> None:
    """Flask-Limiter documents ``limit()`` as a context manager too, to cap a block
    inside a view (``with limiter.limit("10/second"):``, since 2.9). Ported as
    ``with fg.capped("10/second"):`` it was ``TypeError: 'Capping' object does not
    support the context manager protocol``, a 500 at every request to the view with
    nothing saying freqguard's way (``@fg.capped`` on a function the view calls: it is
    capped on its own). Expected: an error naming it."""
    app, fg = _ours(clock)

    @app.get("/block")
    def block() -> str:
        with fg.capped("10/second"):  # type: ignore[attr-defined]
            return "ok"

    with pytest.raises(ConfigError, match=r"Flask-Limiter's `with limiter.limit\(") as found:
        fg.capped("10/second").__enter__()  # type: ignore[attr-defined]
    assert "@fg.capped" in str(found.value)
    app.config["PROPAGATE_EXCEPTIONS"] = True
    with pytest.raises(ConfigError, match="a function the view calls"):
        app.test_client().get("/block")


def _flags() -> object:
    """Flask-Limiter's ``ExemptionScope.DEFAULT`` where it is installed, else a stand-in."""
    if HAS_FLASK_LIMITER:
        from flask_limiter import ExemptionScope

        return ExemptionScope.DEFAULT
    return 2


@pytest.mark.parametrize(
    "exempting",
    [
        lambda fg: fg.exempt(flags=_flags()),
        lambda fg: fg.exempt(_exempt_view, flags=_flags()),
        lambda fg: fg.exempt(),
    ],
    ids=["exempt(flags=)", "exempt(view, flags=)", "exempt()"],
)
def test_exempt_with_flags_names_ours(exempting: Any) -> None:
    """Flask-Limiter's ``@limiter.exempt(flags=ExemptionScope.DEFAULT)`` and
    ``limiter.exempt(bp, flags=...)`` (documented in its ``exempt``), and the bare
    ``@limiter.exempt()`` it also takes: ported to ``fg.exempt`` they were Python's
    ``TypeError: FreqGuard.exempt() got an unexpected keyword argument 'flags'`` (or
    "missing 1 required positional argument: 'target'"), naming nothing. Expected: a
    ConfigError saying what ``@fg.exempt`` leaves out, as the other habits do."""
    with pytest.raises(ConfigError, match=r"@fg\.exempt"):
        exempting(FreqGuard())


def test_meta_limits_on_a_cap_names_ours() -> None:
    """``limit()``'s ``meta_limits=`` (Flask-Limiter's limits on breaches) given to
    ``fg.capped`` was a bare ``TypeError``, where ``Limiter(meta_limits=...)`` names
    freqguard's way. Expected: the same ConfigError as the extension's."""
    with pytest.raises(ConfigError, match="Flask-Limiter's meta_limits="):
        FreqGuard().capped("1/minute", meta_limits=["2/hour"])  # type: ignore[arg-type]


# -- application_limits, by the way the error names ------------------------------------------


def _health() -> str:
    return "up"


def _page() -> str:
    return "ok"


#: Flask-Limiter 4.1 (seen running it): /a, /b, then /health twice, under application
#: limits of "2/hour": its exempt view is out of them (ExemptionScope.APPLICATION)
THEIR_APPLICATION = [200, 404, 200, 200, 200, 429]


def test_application_limits_leave_exempt_views_out(clock: ManualClock) -> None:
    """``Limiter(application_limits=["2/hour"])`` (or ``RATELIMIT_APPLICATION``) was refused
    naming the WSGI middleware's catch-all ``Limit``, which runs before Flask routes the
    request: a view ``@fg.exempt`` (a health check, which Flask-Limiter's
    ``@limiter.exempt`` leaves out of the application limits) was refused once the app's
    budget was spent, and 404s counted. ``FREQGUARD_APPLICATION_LIMITS`` is the
    extension's own: one budget for the app, exempt views and static files left out."""
    app, fg = _ours(clock, FREQGUARD_APPLICATION_LIMITS="2/hour")
    app.add_url_rule("/a", "a", _page)
    app.add_url_rule("/b", "b", _page)
    app.add_url_rule("/health", "health", fg.exempt(_health))
    client = app.test_client()
    paths = ("/a", "/nowhere", "/b", "/health", "/health", "/a")
    ours = [client.get(path).status_code for path in paths]
    if HAS_FLASK_LIMITER:
        theirs_app, limiter = _theirs(application_limits=["2/hour"])
        theirs_app.add_url_rule("/a", "a", _page)
        theirs_app.add_url_rule("/b", "b", _page)
        theirs_app.add_url_rule("/health", "health", limiter.exempt(_health))
        client = theirs_app.test_client()
        theirs = [client.get(path).status_code for path in paths]
        assert theirs == THEIR_APPLICATION
    assert ours == THEIR_APPLICATION


def test_application_limits_as_flask_limiter_names_them_name_ours() -> None:
    """``RATELIMIT_APPLICATION`` is logged naming ``FREQGUARD_APPLICATION_LIMITS``, and
    ``Limiter``'s ``application_limits=`` is refused naming it."""
    with pytest.raises(ConfigError, match="FREQGUARD_APPLICATION_LIMITS"):
        FreqGuard(Flask("refused"), application_limits=["2/hour"])  # type: ignore[arg-type]
