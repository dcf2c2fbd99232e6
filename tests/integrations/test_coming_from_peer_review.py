"""A Flask-Limiter, slowapi and limits user porting a service by docs/coming-from/ and
docs/integrations.md (a review's run): each test is an idiom the pages mapped (or left out)
that did not give what the page said, or failed without naming freqguard's way, a failing
test first. Flask-Limiter's and slowapi's
outcomes quoted here were seen running them beside freqguard on one pinned clock (and are
run again where they are installed)."""

from __future__ import annotations

import asyncio
import importlib.util
import types
from pathlib import Path
from typing import Any

import httpx
import limits.storage.memory
import pytest
from flask import Flask

from freqguard import AsyncGuard, ConfigError, Decision, Guard, ManualClock, MemoryBackend, Rule
from freqguard.integrations.flask import FreqGuard
from tests.conftest import START

HAS_FLASK_LIMITER = importlib.util.find_spec("flask_limiter") is not None


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    manual = ManualClock(START)
    monkeypatch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=manual.now))
    return manual


def _ours(clock: ManualClock, **config: object) -> tuple[Flask, FreqGuard]:
    app = Flask("ours")
    app.config.update(config)
    return app, FreqGuard(app, guard=Guard(MemoryBackend(clock)))


def _codes(app: Flask, path: str, times: int) -> list[int]:
    client = app.test_client()
    codes = []
    for _ in range(times):
        with client.get(path) as response:  # a static file's body is an open file
            codes.append(response.status_code)
    return codes


def _ok() -> str:
    return "ok"


# -- Flask-Limiter --------------------------------------------------------------------------


def test_static_files_are_not_counted_against_the_default_limits(
    clock: ManualClock, tmp_path: Path
) -> None:
    """Read: flask-limiter.md:35, ``default_limits=["2/minute"]`` is
    ``FREQGUARD_DEFAULT_LIMITS = "2/minute"``, "the same: each route (Flask endpoint) its own
    budget". Flask-Limiter never limits the ``static`` endpoint (nor a blueprint's
    ``<bp>.static``): its ``__check_all_limits_exempt`` skips ``endpoint == "static"``. Here
    ``/static/site.css`` is an endpoint like any other: a page with a stylesheet, a script and
    a logo spends the visitor's whole ``"50/hour"`` default in a few page views, and the third
    fetch of the stylesheet is a 429. No page says static files are counted. Expected: static
    files pass uncounted, as there (or a page saying so, with ``@fg.exempt``'s way)."""
    (tmp_path / "site.css").write_text("body {}")
    app = Flask("ours", static_folder=str(tmp_path), static_url_path="/static")
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "2/minute"
    FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    assert _codes(app, "/static/site.css", 4) == [200] * 4


def test_limiter_enabled_false_is_not_silently_ignored(clock: ManualClock) -> None:
    """Flask-Limiter's test fixtures switch it off with ``limiter.enabled = False`` (an
    attribute its ``__check_all_limits_exempt`` reads at every request); flask-limiter.md:47
    maps only ``RATELIMIT_ENABLED`` to ``FREQGUARD_ENABLED``. Written on the extension,
    ``fg.enabled = False`` is taken without a word and does nothing: the routes stay capped
    (200, 429, 429), so the test suite that relied on it fails far from the cause. Expected:
    either the switch works, or setting it raises naming ``FREQGUARD_ENABLED``."""
    app, fg = _ours(clock, FREQGUARD_DEFAULT_LIMITS="1/minute")
    app.add_url_rule("/a", "a", _ok)
    refused: Exception | None = None
    try:
        fg.enabled = False
    except (AttributeError, ConfigError) as error:
        refused = error
    if refused is not None:
        assert "FREQGUARD_ENABLED" in str(refused)
    else:
        assert _codes(app, "/a", 3) == [200, 200, 200]


def test_a_default_limit_the_sliding_log_cannot_hold_fails_in_init_app(
    clock: ManualClock,
) -> None:
    """Flask-Limiter's ``default_limits=["20000 per day"]`` ported as flask-limiter.md:16/35
    says, ``FREQGUARD_DEFAULT_LIMITS = "20000/day"``. ``FreqGuard(app)`` accepts it, and then
    every request to every route is a 500 (the ConfigError "a sliding-log rule ... its limit
    is at most 10000" raised inside ``before_request``). integrations.md:348 says "A default
    rate that does not parse fails in ``init_app``", and a ``Limit`` refuses the same rate
    where it is written. Expected: a ConfigError at ``init_app``, not a 500 per request."""
    app = Flask("ours")
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "20000/day"
    app.add_url_rule("/a", "a", _ok)
    with pytest.raises(ConfigError, match="10000"):
        FreqGuard(app, guard=Guard(MemoryBackend(clock)))


def test_a_view_rate_the_sliding_log_cannot_hold_fails_at_decoration() -> None:
    """``@limiter.limit("20000 per day")`` ported as ``@fg.capped("20000/day")``
    (flask-limiter.md:36): decorating succeeds and every request to the view is a 500.
    integrations.md:348-349: "a view's rate [fails] at decoration"; ``Limit("/a",
    "20000/day")`` is refused as it is made. Expected: a ConfigError at decoration."""
    with pytest.raises(ConfigError, match="10000"):
        FreqGuard().capped("20000/day")


def test_default_limits_can_be_given_a_strategy(clock: ManualClock) -> None:
    """Flask-Limiter's fixed-window default limits hold any count; here a default above
    10,000 needs another strategy (the error for ``"20000/day"`` itself says "use
    strategy='rolling-window'"), and flask-limiter.md:35's mapping gives no place to write
    one: ``FREQGUARD_DEFAULT_LIMITS`` refuses a ``Rule`` ("a rate must be a string like
    '15/minute'"), and ``Limiter(strategy=...)``'s hint says "a strategy is a rule's:
    Rule('2/minute', strategy=...)". No page says how to port a high default limit.
    Expected: ``FREQGUARD_DEFAULT_LIMITS`` takes Rules, as ``fg.capped`` does."""
    app = Flask("ours")
    app.config["FREQGUARD_DEFAULT_LIMITS"] = [Rule("20000/day", strategy="rolling-window")]
    FreqGuard(app, guard=Guard(MemoryBackend(clock)))
    app.add_url_rule("/a", "a", _ok)
    assert _codes(app, "/a", 2) == [200, 200]


@pytest.mark.parametrize(
    "theirs",
    [
        {"default_limits_cost": 2},
        {"default_limits_deduct_when": lambda response: response.status_code == 401},
        {"default_limits_per_method": True},
        {"application_limits_cost": 2},
        {"header_name_mapping": {}},
        {"retry_after": "http-date"},
        {"meta_limits": ["2/hour"]},
        {"fail_on_first_breach": False},
    ],
    ids=lambda given: next(iter(given)),
)
def test_every_limiter_argument_names_freqguards_way(theirs: dict[str, object]) -> None:
    """flask-limiter.md:35: "``Limiter``'s arguments given to ``FreqGuard`` (a key function
    first, ``default_limits=``, ``storage_uri=``) are a ``ConfigError`` naming these". Half of
    ``Limiter.__init__``'s arguments are: these others are Python's bare ``TypeError:
    FreqGuard() got an unexpected keyword argument``, leaving the user to guess (a
    ``default_limits_cost`` has no equivalent, ``retry_after="http-date"`` neither, a
    ``default_limits_deduct_when`` is ``deduct_when=`` on a view). Expected: a ConfigError
    naming Flask-Limiter's argument and freqguard's way, as for the others."""
    [(name, _)] = theirs.items()
    with pytest.raises(ConfigError, match=f"Flask-Limiter's {name}="):
        FreqGuard(Flask("ported"), **theirs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["reset", "current_limit"])
def test_limiters_attributes_name_freqguards_way(name: str) -> None:
    """Flask-Limiter's ``limiter.reset()`` (its documented way to clear the counters
    between tests) and ``limiter.current_limit`` (a view reading its remaining budget):
    ``fg.limit`` and ``fg.shared_limit`` raise an AttributeError naming
    freqguard's way (flask-limiter.md:35), these a bare "'FreqGuard' object has no attribute
    'reset'". No page says what replaces them (a guard per test, ``guard.reset(policy,
    **key)``; the request's decision). Expected: the error names
    Flask-Limiter's attribute and freqguard's way."""
    with pytest.raises(AttributeError, match=f"Flask-Limiter's {name}"):
        getattr(FreqGuard(), name)


def test_override_defaults_true_names_exempt_not_defaults_true() -> None:
    """``@limiter.limit("10/minute", override_defaults=True)`` (their default, written out:
    the route's limit replaces the default limits). Refused with "defaults=True here (on a
    Blueprint's cap)": ``defaults=True`` is Flask-Limiter's ``override_defaults=False``, the
    opposite, and on a view it is itself a ConfigError ("shared= and defaults= apply to a
    Blueprint"). flask-limiter.md:37 gives the way: "``@fg.exempt`` over the cap leaves the
    defaults out, as ``override_defaults=True`` (its default) does". Expected: the error
    for ``override_defaults=True`` names ``@fg.exempt``."""
    with pytest.raises(ConfigError) as refused:
        FreqGuard().capped("10/minute", override_defaults=True)  # type: ignore[arg-type]
    assert "exempt" in str(refused.value), str(refused.value)


#: Flask-Limiter 4.1's codes for the shared-limit case below (seen running it here).
THEIR_SHARED = [200, 200, 200, 429]
PAGE = Path(__file__).resolve().parents[2] / "docs" / "coming-from" / "flask-limiter.md"


def _row(start: str) -> str:
    [row] = [line for line in PAGE.read_text().splitlines() if line.startswith(start)]
    return row


def test_a_shared_limit_beside_default_limits(clock: ManualClock) -> None:
    """flask-limiter.md:45 said ``limiter.shared_limit("2/minute", scope="s")`` is
    ``@fg.capped("2/minute", name="s")``, "the same: one budget for the routes that name
    it". With default limits set it was not, and the row did not say: Flask-Limiter's
    shared limit replaces the defaults on its routes (``override_defaults=True``),
    freqguard keeps each route's default limits beside the shared cap, as for a route's
    limit (md:36, "differs"). ``"1/minute"`` defaults and ``"3/minute"`` shared by /x and
    /y: theirs admits three of /x, /x, /y, /y, ours two. The row now says it differs, and
    ``@fg.exempt`` over the cap gives theirs."""
    app, fg = _ours(clock, FREQGUARD_DEFAULT_LIMITS="1/minute")
    for path in ("x", "y"):
        app.add_url_rule(f"/{path}", path, fg.capped("3/minute", name="s")(_ok))
    client = app.test_client()
    assert [client.get(path).status_code for path in ("/x", "/x", "/y", "/y")] == [
        200,
        429,
        200,
        429,
    ]
    exempt_app, exempt_fg = _ours(clock, FREQGUARD_DEFAULT_LIMITS="1/minute")
    for path in ("x", "y"):
        view = exempt_fg.exempt(exempt_fg.capped("3/minute", name="s")(_ok))
        exempt_app.add_url_rule(f"/{path}", path, view)
    client = exempt_app.test_client()
    ours = [client.get(path).status_code for path in ("/x", "/x", "/y", "/y")]
    if HAS_FLASK_LIMITER:
        from flask_limiter import Limiter
        from flask_limiter.util import get_remote_address

        theirs_app = Flask("theirs")
        limiter = Limiter(
            get_remote_address,
            app=theirs_app,
            storage_uri="memory://",
            default_limits=["1/minute"],
        )
        shared = limiter.shared_limit("3/minute", scope="s")
        for path in ("x", "y"):
            theirs_app.add_url_rule(f"/{path}", path, shared(_ok))
        client = theirs_app.test_client()
        assert [client.get(p).status_code for p in ("/x", "/x", "/y", "/y")] == THEIR_SHARED
    assert ours == THEIR_SHARED
    row = _row("| `limiter.shared_limit(")
    assert "differs beside default limits" in row
    assert "@fg.exempt" in row


#: Flask-Limiter 4.1's X-RateLimit-Limit/-Remaining for the three requests below.
THEIR_HEADERS = [("2", "1"), ("2", "1"), ("2", "1")]


def test_x_ratelimit_headers_of_several_default_limits(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flask-limiter.md:48: ``headers_enabled=True`` is ``FREQGUARD_HEADERS =
    "x-ratelimit"``, "the same limit and remaining". With several limits (the page's own
    ``"200/day; 50/hour"``) they differ: Flask-Limiter reports the limit of the shortest
    window that is not breached (``current_limit``), freqguard the rule with the least
    remaining. ``"2/second; 3/minute"``, requests at 0 s, 1.5 s and 3 s: theirs says
    ``2``/``1`` each time, ours ``3``/``0`` on the third. Either is defensible; the page
    said "the same" and did not mention it. The row now says which limit each reports."""
    app, _ = _ours(
        clock, FREQGUARD_DEFAULT_LIMITS="2/second; 3/minute", FREQGUARD_HEADERS="x-ratelimit"
    )
    app.add_url_rule("/a", "a", _ok)
    client = app.test_client()
    ours = []
    for offset in (0, 1.5, 3.0):
        clock.set(START + offset)
        response = client.get("/a")
        ours.append(
            (response.headers["X-RateLimit-Limit"], response.headers["X-RateLimit-Remaining"])
        )
    if HAS_FLASK_LIMITER:
        import flask_limiter._extension
        from flask_limiter import Limiter
        from flask_limiter.util import get_remote_address

        theirs_clock = ManualClock(START)
        now = types.SimpleNamespace(time=theirs_clock.now)
        monkeypatch.setattr(limits.storage.memory, "time", now)
        monkeypatch.setattr(flask_limiter._extension, "time", now)
        theirs_app = Flask("theirs")
        Limiter(
            get_remote_address,
            app=theirs_app,
            storage_uri="memory://",
            default_limits=["2/second", "3/minute"],
            headers_enabled=True,
        )
        theirs_app.add_url_rule("/a", "a", _ok)
        client = theirs_app.test_client()
        theirs = []
        for offset in (0, 1.5, 3.0):
            theirs_clock.set(START + offset)
            response = client.get("/a")
            theirs.append(
                (response.headers["X-RateLimit-Limit"], response.headers["X-RateLimit-Remaining"])
            )
        assert theirs == THEIR_HEADERS
    # the rule nearest exhaustion here (a tie: the longer window's), as the row says
    assert ours == [("2", "1"), ("3", "1"), ("3", "0")]
    assert "nearest exhaustion" in _row("| `headers_enabled=True`")


# -- slowapi / FastAPI ----------------------------------------------------------------------


def _get(app: Any, path: str, times: int) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [await http.get(path) for _ in range(times)]

    return asyncio.run(run())


def test_limit_dependency_headers_on_an_endpoint_returning_a_response(
    clock: ManualClock,
) -> None:
    """flask-limiter.md:57: slowapi's ``@limiter.limit("2/minute")`` is
    ``Depends(limit_dependency(...))``, "the same answers"; ``limit_dependency``'s
    docstring: "allowed responses get the rate-limit headers". slowapi (``headers_enabled``)
    puts its headers on the ``JSONResponse`` an endpoint returns. Here the dependency writes
    them on FastAPI's ``Response`` parameter, which FastAPI drops when the endpoint returns
    a Response of its own: the admitted answers carried no ``RateLimit`` header (only the
    429 did), and no page said so. A dependency cannot reach a Response the endpoint makes:
    its value is now the decision, and the pages say to add its headers, as here."""
    pytest.importorskip("fastapi")
    from fastapi import Depends, FastAPI
    from fastapi.responses import JSONResponse

    from freqguard.integrations.starlette import Refused, limit_dependency, refused_handler

    guard = AsyncGuard(MemoryBackend(), clock=clock)
    app = FastAPI(exception_handlers={Refused: refused_handler})

    limited = Depends(limit_dependency(guard, "2/minute", name="j"))

    @app.get("/j")
    async def j(decision: Decision = limited) -> JSONResponse:
        return JSONResponse({"ok": True}, headers=decision.headers())

    first, second, refused = _get(app, "/j", 3)
    assert refused.status_code == 429
    assert first.headers.get("ratelimit") == '"sl.2.60s";r=1;t=60'
    assert second.headers.get("ratelimit") == '"sl.2.60s";r=0;t=60'


def test_the_middlewares_refusal_can_be_answered_by_the_app(clock: ManualClock) -> None:
    """slowapi's users answer a breach themselves with
    ``app.add_exception_handler(RateLimitExceeded, my_handler)`` (its
    ``_rate_limit_exceeded_handler`` replaced); flask-limiter.md:58 says "nothing to add
    with ``FreqGuardMiddleware``", and Flask's page gives ``@app.errorhandler(CapExceeded)``
    (integrations.md:364). With the middleware, a handler for ``Refused`` (or for 429) is
    taken and never called: the middleware sends its problem document itself (the app is
    not called), and no page said how to answer a middleware's denial another way. Now its
    ``refused=`` does, with the rate-limit headers, and the pages name it."""
    pytest.importorskip("fastapi")
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, Refused

    async def slow_down(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": "slow down"}, status_code=429)

    app = FastAPI(exception_handlers={Refused: slow_down, 429: slow_down})

    @app.get("/a")
    async def a() -> dict[str, bool]:
        return {"ok": True}

    async def answer(scope: Any, decision: Decision) -> JSONResponse:
        return JSONResponse({"error": "slow down", "wait": decision.retry_after}, 429)

    app.add_middleware(
        FreqGuardMiddleware,
        guard=AsyncGuard(MemoryBackend(), clock=clock),
        limits=[Limit("/a", "1/minute")],
        refused=answer,
    )
    refused = _get(app, "/a", 2)[1]
    assert (refused.status_code, refused.json()) == (429, {"error": "slow down", "wait": 60.0})
    assert refused.headers["retry-after"] == "60"
    assert refused.headers["content-type"] == "application/json"


def test_limit_dependency_names_slowapis_key_func() -> None:
    """slowapi's ``@limiter.limit("5/minute", key_func=...)`` given to ``limit_dependency``
    (flask-limiter.md:57's other way) is Python's bare ``TypeError: limit_dependency() got
    an unexpected keyword argument 'key_func'``, where ``Limit`` (the same row) refuses it
    naming ``key=``. Expected: the same ConfigError as ``Limit``'s."""
    from freqguard.integrations.starlette import limit_dependency

    with pytest.raises(ConfigError, match=r"slowapi's key_func=.*key= here"):
        limit_dependency(
            AsyncGuard(),
            "5/minute",
            name="login",
            key_func=lambda request: "u",  # type: ignore[arg-type]
        )


# -- limits ---------------------------------------------------------------------------------


def _limits_item() -> Any:
    from limits import RateLimitItemPerMinute

    return RateLimitItemPerMinute(10)


def _fg_capped(item: object) -> object:
    return FreqGuard().capped(item)  # type: ignore[arg-type]


def _capped(item: object) -> object:
    from freqguard import capped

    return capped(item, guard=Guard())  # type: ignore[arg-type]


def _limit(item: object) -> object:
    from freqguard.integrations.starlette import Limit

    return Limit("/a", item)  # type: ignore[arg-type]


def _parse_rates(item: object) -> object:
    from freqguard import parse_rates

    return parse_rates(item)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "take", [_capped, _fg_capped, _limit, _parse_rates], ids=lambda f: f.__name__.strip("_")
)
def test_a_limits_item_is_a_rate_wherever_a_rate_string_is(take: Any) -> None:
    """limits.md:31: "``Rule`` takes the item itself, or its string" (``Rule(parse(...))``,
    ``RateLimitItemPerMinute(10)``). ``@capped``, ``fg.capped``, ``Limit`` and
    ``parse_rates``, which take a rate string where ``Rule`` does, refuse the same item,
    with an error that prints it as its text: "takes a rate string ('5/minute') ... got 10
    per 1 minute", which reads as a rate string refused. Expected: the item taken as
    ``Rule`` takes it."""
    assert take(_limits_item()) is not None
