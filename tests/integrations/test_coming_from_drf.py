"""docs/coming-from/drf.md, row by row: DRF's throttle classes and freqguard's on the same
views and requests, one pinned clock (DRF's ``timer``, the guard's ManualClock), the
outcomes equal or different as the page says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.errors import ConfigError

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.test import override_settings  # noqa: E402
from rest_framework import throttling  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.test import APIRequestFactory  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard.integrations import drf  # noqa: E402

REST = django_site.SETTINGS["REST_FRAMEWORK"]
START = 1_700_000_000.0


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    manual = ManualClock(START)
    cache.clear()  # DRF's histories
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(manual))):
        yield manual


def _timed(throttle: type[Any], clock: ManualClock, **attrs: Any) -> type[Any]:
    """DRF's throttle on the test's clock (DRF's own tests override ``timer`` so)."""
    return type(throttle.__name__, (throttle,), {"timer": lambda self: clock.now(), **attrs})


def _view(throttles: list[type[Any]], **attrs: Any) -> Any:
    def get(self: APIView, request: Request) -> Response:
        return Response("ok")

    made: type[APIView] = type(
        "View", (APIView,), {"throttle_classes": throttles, "get": get, **attrs}
    )
    return made.as_view()


def _codes(view: Any, times: int, user: str | None = None) -> list[int]:
    factory = APIRequestFactory()
    request = factory.get("/", HTTP_X_USER=user) if user else factory.get("/")
    return [view(request).status_code for _ in range(times)]


def _rates(**rates: str | None) -> Any:
    return override_settings(REST_FRAMEWORK={**REST, "DEFAULT_THROTTLE_RATES": rates})


def test_scoped_throttle(clock: ManualClock) -> None:
    rates = {"x": "3/min", "y": "1/min"}
    theirs_cls = _timed(throttling.ScopedRateThrottle, clock, THROTTLE_RATES=rates)
    for throttle in (theirs_cls, drf.FreqGuardScopedThrottle):
        cache.clear()
        x = _view([throttle], throttle_scope="x")
        y = _view([throttle], throttle_scope="y")
        unscoped = _view([throttle])
        with _rates(**rates):
            assert _codes(x, 4) == [200, 200, 200, 429]
            assert _codes(y, 2) == [200, 429]
            assert _codes(unscoped, 5) == [200] * 5
            clock.advance(60)
            assert _codes(x, 4) == [200, 200, 200, 429]


def test_anon_throttle(clock: ManualClock) -> None:
    theirs_cls = _timed(throttling.AnonRateThrottle, clock, THROTTLE_RATES={"anon": "2/min"})
    for throttle in (theirs_cls, drf.FreqGuardAnonThrottle):
        cache.clear()
        view = _view([throttle])
        with _rates(anon="2/min"):
            assert _codes(view, 3) == [200, 200, 429]
            assert _codes(view, 4, user="ann") == [200] * 4


#: Anonymous clients behind proxies 10.0.0.2 and 10.0.0.3, the last appending to
#: X-Forwarded-For; the peer the server sees is 10.9.9.9.
CHAINS = ["1.1.1.1, 10.0.0.2", "2.2.2.2, 10.0.0.2", "1.1.1.1, 10.0.0.3", "3.3.3.3", ""]


def _behind(view: Any, proxies: int | None) -> list[int]:
    rest = {**REST, "DEFAULT_THROTTLE_RATES": {"anon": "1/min"}, "NUM_PROXIES": proxies}
    factory = APIRequestFactory()
    with override_settings(REST_FRAMEWORK=rest):
        return [
            view(factory.get("/", HTTP_X_FORWARDED_FOR=xff, REMOTE_ADDR="10.9.9.9")).status_code
            if xff
            else view(factory.get("/", REMOTE_ADDR="10.9.9.9")).status_code
            for xff in CHAINS
        ]


@pytest.mark.parametrize("proxies", [0, 1, 2, 5])
def test_num_proxies(clock: ManualClock, proxies: int) -> None:
    """Behind ``NUM_PROXIES`` proxies DRF keys an anonymous request by the address that
    many hops from the right of X-Forwarded-For (the peer with 0, or without the header);
    freqguard's throttles keyed the peer, so every client behind the proxy shared one
    budget (a review of the coming-from pages). Seen failing first."""
    theirs_cls = _timed(throttling.AnonRateThrottle, clock, THROTTLE_RATES={"anon": "1/min"})
    theirs = _behind(_view([theirs_cls]), proxies)
    assert _behind(_view([drf.FreqGuardAnonThrottle]), proxies) == theirs
    expected = {0: [200, 429, 429, 429, 429], 1: [200, 429, 200, 200, 200]}
    assert theirs == expected.get(proxies, [200, 200, 429, 200, 200])


def test_behind_num_proxies_a_hop_is_keyed_as_client_ip_keys_it(clock: ManualClock) -> None:
    """DRF keys the hop's text as it is: an IPv6 client rotating addresses in its /64, or
    one reaching the app directly with a made-up header, got a budget per value. Here an
    IPv6 hop is keyed by its /64, as client_ip keys a peer, and a hop that is no address
    is no key: the peer is (review)."""
    rest = {**REST, "DEFAULT_THROTTLE_RATES": {"anon": "1/min"}, "NUM_PROXIES": 1}
    factory = APIRequestFactory()
    view = _view([drf.FreqGuardAnonThrottle])

    def codes(hops: list[str]) -> list[int]:
        with override_settings(REST_FRAMEWORK=rest):
            return [
                view(factory.get("/", HTTP_X_FORWARDED_FOR=h, REMOTE_ADDR="10.0.0.1")).status_code
                for h in hops
            ]

    assert codes(["2001:db8::1", "2001:db8::2", "2001:db8:0:1::1"]) == [200, 429, 200]
    cache.clear()
    assert codes(["junk-1", "junk-2"]) == [200, 429]  # the peer's budget, once


def test_without_num_proxies_the_peer_keys_a_request(clock: ManualClock) -> None:
    """Without ``NUM_PROXIES`` DRF keys by the whole X-Forwarded-For, which any client
    writes as it likes (a new value, a new budget); freqguard keys by the peer, unless
    ``NUM_PROXIES`` or the throttle's ``trusted_proxies`` say which hops to believe."""
    theirs_cls = _timed(throttling.AnonRateThrottle, clock, THROTTLE_RATES={"anon": "1/min"})
    assert _behind(_view([theirs_cls]), None) == [200, 200, 200, 200, 200]
    assert _behind(_view([drf.FreqGuardAnonThrottle]), None) == [200, 429, 429, 429, 429]


def test_user_throttle(clock: ManualClock) -> None:
    theirs_cls = _timed(throttling.UserRateThrottle, clock, THROTTLE_RATES={"user": "2/min"})
    for throttle in (theirs_cls, drf.FreqGuardUserThrottle):
        cache.clear()
        view = _view([throttle])
        with _rates(user="2/min"):
            assert _codes(view, 3, user="ann") == [200, 200, 429]
            assert _codes(view, 2, user="bob") == [200, 200]
            assert _codes(view, 3) == [200, 200, 429]


@pytest.mark.parametrize("rate", ["3/min", "3/m", "3/minute"])
def test_a_class_rate(clock: ManualClock, rate: str) -> None:
    theirs = _view([_timed(throttling.UserRateThrottle, clock, rate=rate, scope="r")])
    ours = _view([type("Ours", (drf.FreqGuardThrottle,), {"rate": rate})])
    assert _codes(theirs, 4) == _codes(ours, 4) == [200, 200, 200, 429]


def test_two_throttles(clock: ManualClock) -> None:
    """DRF's test_request_throttling_multiple_throttles: 3/sec and 6/min; the second
    counts a request the first denied; denied requests add nothing."""
    sec = _timed(throttling.UserRateThrottle, clock, rate="3/sec", scope="seconds")
    mins = _timed(throttling.UserRateThrottle, clock, rate="6/min", scope="minutes")
    ours_sec = type("Sec", (drf.FreqGuardThrottle,), {"rate": "3/sec", "scope": "s"})
    ours_min = type("Min", (drf.FreqGuardThrottle,), {"rate": "6/min", "scope": "m"})
    for first, second in ((sec, mins), (ours_sec, ours_min)):
        cache.clear()
        view = _view([first, second])
        base = clock.now()
        assert _codes(view, 4) == [200, 200, 200, 429]
        clock.set(base + 1)
        assert _codes(view, 3) == [200, 200, 429]  # the denied fourth counted by 6/min
        clock.set(base + 2)
        assert _codes(view, 1) == [429]
        clock.set(base + 120)


def test_a_rate_of_none(clock: ManualClock) -> None:
    theirs_cls = _timed(throttling.ScopedRateThrottle, clock, THROTTLE_RATES={"x": None})
    for throttle in (theirs_cls, drf.FreqGuardScopedThrottle):
        with _rates(x=None):
            assert _codes(_view([throttle], throttle_scope="x"), 5) == [200] * 5


def test_a_month(clock: ManualClock) -> None:
    theirs = _view([_timed(throttling.UserRateThrottle, clock, rate="1/month", scope="mo")])
    ours = _view([type("Monthly", (drf.FreqGuardThrottle,), {"rate": "1/month"})])
    assert _codes(theirs, 2) == _codes(ours, 2) == [200, 429]
    clock.advance(61)
    assert _codes(theirs, 1) == [200]  # DRF: "month" is read as "m", a minute
    assert _codes(ours, 1) == [429]  # a month
    with pytest.raises(ConfigError, match="1/mo"):
        drf.drf_rates("1/mo")


def test_a_scope_with_no_rate(clock: ManualClock) -> None:
    """A ``throttle_scope`` the rates do not name (``"uploads"`` beside ``"upload"``): DRF
    finds it at the first request to the view, ImproperlyConfigured (a 500); freqguard's
    request fails as well, and ``manage.py check`` finds it before any (``E004``)."""
    rates = {"upload": "10/hour"}
    theirs = _timed(throttling.ScopedRateThrottle, clock, THROTTLE_RATES=rates)
    with pytest.raises(ImproperlyConfigured, match="No default throttle rate set for 'uploads'"):
        _codes(_view([theirs], throttle_scope="uploads"), 1)
    urls = "tests.integrations.drf_check_urls"  # its Uploads: throttle_scope = "uploads"
    with _rates(**rates), override_settings(ROOT_URLCONF=urls):
        with pytest.raises(ConfigError, match=r"DEFAULT_THROTTLE_RATES\['uploads'\]"):
            _codes(_view([drf.FreqGuardScopedThrottle], throttle_scope="uploads"), 1)
        found = [m.msg for m in checks.run_checks() if m.id == "freqguard.E004"]
    assert any("Uploads (URL 'api/uploads')" in m and "'upload'?" in m for m in found)


def test_no_rate_and_no_scope(clock: ManualClock) -> None:
    """A throttle with neither a ``rate`` nor a ``scope``: DRF's fails every request
    (ImproperlyConfigured, a 500); freqguard's reads ``FREQGUARD_DEFAULT_LIMITS``, and
    without them fails every request as well, which ``manage.py check`` finds first
    (``E006``)."""
    theirs = _timed(throttling.SimpleRateThrottle, clock)
    with pytest.raises(ImproperlyConfigured, match=r"You must set either `\.scope` or `\.rate`"):
        _codes(_view([theirs]), 1)
    with _rates():
        with pytest.raises(ConfigError, match="FreqGuardThrottle has no rate"):
            _codes(_view([drf.FreqGuardThrottle]), 1)
        with override_settings(FREQGUARD_DEFAULT_LIMITS="2/minute"):
            assert _codes(_view([drf.FreqGuardThrottle]), 3) == [200, 200, 429]
    urls = "tests.integrations.drf_check_urls"  # its Unrated: the generic throttle
    with _rates(), override_settings(ROOT_URLCONF=urls):
        found = [m.msg for m in checks.run_checks() if m.id == "freqguard.E006"]
    assert any("Unrated (URL 'unrated/0')" in m and "neither a rate" in m for m in found)


def test_a_dotted_path_in_throttle_classes(clock: ManualClock) -> None:
    """A dotted path in a view's ``throttle_classes`` (as ``DEFAULT_THROTTLE_CLASSES`` are
    written): DRF calls it as it is, so every request fails, DRF's throttle's path or
    freqguard's alike; ``manage.py check`` finds it before any (``E005``)."""
    for path in (
        "rest_framework.throttling.AnonRateThrottle",
        "freqguard.integrations.drf.FreqGuardAnonThrottle",
    ):
        with _rates(anon="3/min"), pytest.raises(TypeError, match="'str' object is not callable"):
            _codes(_view([path]), 1)  # type: ignore[list-item]
    urls = "tests.integrations.drf_check_urls"  # its Dotted: a path in throttle_classes
    with _rates(), override_settings(ROOT_URLCONF=urls):
        found = [m.msg for m in checks.run_checks() if m.id == "freqguard.E005"]
    assert any("Dotted (URL 'dotted')" in m and "import ExportsScope" in m for m in found)


def test_get_throttles(clock: ManualClock) -> None:
    """A view choosing its throttles in ``get_throttles()`` (here: none for a GET): DRF and
    freqguard run what it answers, at each request; ``manage.py check`` cannot call it
    without one, so it does not judge the view's ``throttle_classes`` and names the views
    it cannot see in one Info (``I001``)."""
    theirs = _timed(throttling.ScopedRateThrottle, clock, THROTTLE_RATES={"x": "1/min"})
    for throttle in (theirs, drf.FreqGuardScopedThrottle):
        cache.clear()

        def get_throttles(self: APIView) -> list[Any]:
            return [] if self.request.method == "GET" else [throttle()]  # noqa: B023 (called in this iteration)

        view = _view([throttle], throttle_scope="x", get_throttles=get_throttles)
        post = APIRequestFactory().post("/")
        with _rates(x="1/min"):
            assert _codes(view, 3) == [200] * 3
            # a POST is throttled (then refused, 405: the view has no post), a GET is not
            assert [view(post).status_code for _ in range(2)] == [405, 429]
    urls = "tests.integrations.drf_check_urls"  # its Chosen: get_throttles() overridden
    with _rates(), override_settings(ROOT_URLCONF=urls):
        found = [m for m in checks.run_checks() if m.id == "freqguard.I001"]
    assert [m.level for m in found] == [checks.INFO]
    assert "Chosen (URL 'chosen')" in found[0].msg


def test_wait(clock: ManualClock) -> None:
    """5/min, four requests at 0 s, a fifth at 30 s: after it, DRF's wait() answers a pace
    and freqguard's None; a sixth is denied by both, and both wait the 30 s until the oldest
    leaves the window."""
    theirs = _timed(throttling.UserRateThrottle, clock, rate="5/min", scope="w")()
    ours_cls = type("Ours", (drf.FreqGuardThrottle,), {"rate": "5/min"})
    request = Request(APIRequestFactory().get("/"))
    view = APIView()
    for _ in range(4):
        assert theirs.allow_request(request, view)
        assert ours_cls().allow_request(request, view)
    clock.advance(30)
    assert theirs.allow_request(request, view)
    assert theirs.wait() == 30.0  # a pace: the time left over the requests left
    ours = ours_cls()
    assert ours.allow_request(request, view)
    assert ours.wait() is None  # admitted: nothing to wait for
    denied_theirs, denied_ours = (
        _timed(throttling.UserRateThrottle, clock, rate="5/min", scope="w")(),
        ours_cls(),
    )
    assert not denied_theirs.allow_request(request, view)
    assert not denied_ours.allow_request(request, view)
    assert denied_theirs.wait() == denied_ours.wait() == 30.0  # the exact time, both


def test_settings_that_change(clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = _view([throttling.ScopedRateThrottle], throttle_scope="x")
    ours = _view([drf.FreqGuardScopedThrottle], throttle_scope="x")
    with _rates(x="1/min"):
        # DRF's class kept the rates of the settings it was imported under: no "x" there
        with pytest.raises(Exception, match="No default throttle rate set for 'x' scope"):
            _codes(theirs, 1)
        assert _codes(ours, 2) == [200, 429]
        with _rates(x="3/min"):
            assert _codes(ours, 3) == [200, 200, 429]  # read at its new rate


def test_a_class_rate_changed_at_run_time(clock: ManualClock) -> None:
    """A class's ``rate`` is read at each request on both sides: DRF's too (it is the
    settings' THROTTLE_RATES that DRF's classes keep from their import)."""
    theirs_cls = _timed(throttling.AnonRateThrottle, clock, rate="1/min")
    ours_cls = type("Ours", (drf.FreqGuardAnonThrottle,), {"rate": "1/min"})
    for throttle in (theirs_cls, ours_cls):
        view = _view([throttle])
        assert _codes(view, 2) == [200, 429]
        throttle.rate = "3/min"  # type: ignore[attr-defined]
        assert _codes(view, 3) == [200, 200, 429]  # 3 a minute, the first one counted


def _tenants(view: Any, tenants: list[str | None]) -> list[int]:
    factory = APIRequestFactory()
    return [
        view(factory.get("/", HTTP_X_TENANT=t) if t else factory.get("/")).status_code
        for t in tenants
    ]


def _by_tenant(self: Any, request: Any, view: Any) -> str | None:
    tenant = request.headers.get("x-tenant")
    return None if tenant is None else f"tenant-{tenant}"


def _by_client_header(self: Any, request: Any) -> str:
    return str(request.headers.get("x-tenant", "none"))


TENANTS = ["a", "a", "a", "b", "b", None, None, None]


def test_get_cache_key(clock: ManualClock) -> None:
    """A throttle keyed by its own ``get_cache_key`` (DRF's way to key by anything): its
    string is the budget's key, None leaves the request unthrottled. freqguard's ignored
    it and keyed by address (a new user's tenant b was refused; found by a new-user run)."""
    hooks = {"rate": "2/min", "get_cache_key": _by_tenant}
    theirs = _view([_timed(throttling.SimpleRateThrottle, clock, **hooks)])
    ours = _view([type("Tenant", (drf.FreqGuardThrottle,), hooks)])
    expected = [200, 200, 429, 200, 200, 200, 200, 200]
    assert _tenants(theirs, TENANTS) == _tenants(ours, TENANTS) == expected


def test_get_ident(clock: ManualClock) -> None:
    """An anonymous request's address as the throttle's own ``get_ident`` finds it."""
    theirs_cls = _timed(
        throttling.AnonRateThrottle,
        clock,
        THROTTLE_RATES={"anon": "2/min"},
        get_ident=_by_client_header,
    )
    ours_cls = type("Ident", (drf.FreqGuardAnonThrottle,), {"get_ident": _by_client_header})
    with _rates(anon="2/min"):
        theirs = _tenants(_view([theirs_cls]), TENANTS)
        assert (
            _tenants(_view([ours_cls]), TENANTS)
            == theirs
            == [200, 200, 429, 200, 200, 200, 200, 429]
        )


def test_get_rate(clock: ManualClock) -> None:
    """A rate from the throttle's own ``get_rate``, or a ``THROTTLE_RATES`` of its class."""
    keyed = {"get_cache_key": lambda self, request, view: "k"}
    hooks = {"scope": "s", "get_rate": lambda self: "1/min", **keyed}
    for made in (
        _view([_timed(throttling.SimpleRateThrottle, clock, **hooks)]),
        _view([type("Rated", (drf.FreqGuardThrottle,), hooks)]),
    ):
        with _rates(s="5/min"):
            assert _codes(made, 2) == [200, 429]
    cache.clear()  # DRF's history of key "k"
    table = {"scope": "t", "THROTTLE_RATES": {"t": "1/min"}, **keyed}
    for made in (
        _view([_timed(throttling.SimpleRateThrottle, clock, **table)]),
        _view([type("Tabled", (drf.FreqGuardThrottle,), table)]),
    ):
        with _rates(t="5/min"):
            assert _codes(made, 2) == [200, 429]


def test_get_cache_key_is_one_budget_across_views(clock: ManualClock) -> None:
    """A ``get_cache_key``'s string is the budget on every view the throttle serves, as in
    DRF (its cache key): freqguard's kept one budget a view, so a tenant had as many
    budgets as views (found by review)."""
    hooks = {"rate": "2/min", "get_cache_key": lambda self, request, view: "tenant-a"}
    answers = []
    for throttle in (
        _timed(throttling.SimpleRateThrottle, clock, **hooks),
        type("Tenant", (drf.FreqGuardThrottle,), hooks),
    ):
        views = [_named(name, [throttle]) for name in ("Orders", "Items")]
        answers.append(_codes(views[0], 2) + _codes(views[1], 1))
    assert answers[0] == answers[1] == [200, 200, 429]


def test_a_rate_is_read_before_get_rate(clock: ManualClock) -> None:
    """A class's ``rate`` is read before its ``get_rate()``, as DRF's ``__init__`` does: a
    subclass's ``rate`` over an inherited ``get_rate`` was ignored (found by review)."""
    hooks = {"get_rate": lambda self: "5/min", "get_cache_key": lambda self, r, v: "k"}
    for base in (
        _timed(throttling.SimpleRateThrottle, clock, **hooks),
        type("Rated", (drf.FreqGuardThrottle,), hooks),
    ):
        strict = type("Strict", (base,), {"rate": "1/min"})
        assert _codes(_view([strict]), 2) == [200, 429]


def _named(name: str, throttles: list[type[Any]]) -> Any:
    def get(self: APIView, request: Request) -> Response:
        return Response("ok")

    made: type[APIView] = type(name, (APIView,), {"throttle_classes": throttles, "get": get})
    return made.as_view()


@pytest.mark.parametrize(
    "hook", ["timer", "cache", "parse_rate", "throttle_success", "throttle_failure"]
)
def test_drf_hooks_freqguard_does_not_read(hook: str) -> None:
    """What only DRF's own counting reads is refused as the class is made, naming
    freqguard's way (never a setting that quietly does nothing), on the class or a mixin
    it takes it from (review: a mixin's went unread, silently)."""
    with pytest.raises(ConfigError, match=f"Hooked.{hook} is DRF's"):
        type("Hooked", (drf.FreqGuardThrottle,), {hook: None})
    mixin = type("Mixin", (), {hook: None})
    with pytest.raises(ConfigError, match=f"Hooked.{hook} is DRF's"):
        type("Hooked", (mixin, drf.FreqGuardThrottle), {})


def _drf_style_key(self: Any, request: Any, view: Any) -> str:
    """A get_cache_key as DRF's own are written, ported as it is."""
    return str(self.cache_format % {"scope": self.scope, "ident": request.headers["x-tenant"]})


def test_a_ported_get_cache_key_reads_cache_format(clock: ManualClock) -> None:
    """DRF's own get_cache_key, and its docs', build the key from ``self.cache_format``:
    ported as it is, it failed every request (an AttributeError, a 500; review). The key
    is its string, so ``cache_format`` shapes it, as in DRF; one without a get_cache_key
    of the class's own shapes nothing, and is refused."""
    hooks = {"scope": "t", "get_cache_key": _drf_style_key}
    with _rates(t="2/min"):
        table = {"THROTTLE_RATES": {"t": "2/min"}}  # DRF's: the settings it was imported under
        theirs = _view([_timed(throttling.SimpleRateThrottle, clock, **hooks, **table)])
        ours = _view([type("Ported", (drf.FreqGuardThrottle,), hooks)])
        expected = [200, 200, 429, 200, 200]
        assert _tenants(theirs, TENANTS[:5]) == _tenants(ours, TENANTS[:5]) == expected
    unread = type("Unread", (drf.FreqGuardThrottle,), {"rate": "1/min", "cache_format": "x"})
    with pytest.raises(ConfigError, match="cache_format is read by a get_cache_key"):
        _codes(_view([unread]), 1)  # at its first request, as its rate is read
