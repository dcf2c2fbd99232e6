"""Review of the coming-from pages (docs/coming-from/*.md) against the peers themselves,
each test one finding, the peer run beside freqguard on one pinned clock where it answers."""

from __future__ import annotations

import types

import pytest

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard import capped as fg_capped
from tests.conftest import START


def test_throttled_decorator_timeout_is_not_a_silent_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """throttled-py's ``@Throttled(key=..., quota=..., timeout=120)`` waits for the call's
    turn and runs it. The throttled-py page maps ``Throttled(timeout=120)`` to a timeout and
    ``@Throttled(...)`` to ``@capped(policy, guard=...)``; ``@capped(policy, timeout=120)``
    is accepted and the timeout ignored (on_exceeded stays "raise"): the second call raises
    at once. A peer's option accepted and ignored must be refused as the cap is made,
    naming on_exceeded="wait"."""
    throttled = pytest.importorskip("throttled")
    from throttled import MemoryStore, Throttled, per_min

    theirs_clock = ManualClock(START)
    utils = throttled.utils
    monkeypatch.setattr(utils, "now_sec", lambda: int(theirs_clock.now()))
    monkeypatch.setattr(utils, "now_ms", lambda: int(theirs_clock.now() * 1000))
    monkeypatch.setattr(utils, "now_mono_f", theirs_clock.now)
    waits = types.SimpleNamespace(sleep=theirs_clock.advance, time=theirs_clock.now)
    monkeypatch.setattr(throttled.throttled, "time", waits)

    @Throttled(key="send", using="gcra", quota=per_min(1), store=MemoryStore(), timeout=120)
    def theirs() -> str:
        return "sent"

    assert theirs() == theirs() == "sent"  # the second waited its turn
    assert theirs_clock.now() - START == pytest.approx(60)

    clock = ManualClock(START)
    guard = Guard(MemoryBackend(clock), [Policy("send", Rule("1/minute"))], clock=clock)
    with pytest.raises(ConfigError, match="on_exceeded"):
        fg_capped("send", guard=guard, timeout=120)  # today: accepted, and ignored


def test_their_header_key_hint_names_their_header() -> None:
    """django-ratelimit's ``key="header:x-real-ip"`` is refused (good) with the hint
    ``key=header('x-api-key')``: the fix named is another header, whatever header they
    wrote. Copied, every request that does not send X-Api-Key is a 400 (and those that do
    are keyed by the wrong value). The hint should name their header."""
    pytest.importorskip("django")
    from freqguard.integrations.django import capped
    from tests.integrations import django_site  # noqa: F401 -- configures Django

    with pytest.raises(ConfigError) as refused:
        capped("5/m", key="header:x-real-ip")  # type: ignore[arg-type]
    assert "header('x-real-ip')" in str(refused.value), str(refused.value)


def test_flask_limiters_cost_is_charged_to_the_route_limit_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flask-Limiter's ``@limiter.limit("10/minute", cost=2)`` charges 2 to that limit; the
    default limits, when kept beside it (``override_defaults=False``, which is freqguard's
    way per the page's route-limit row), count the request once. ``@fg.capped("10/minute",
    cost=2)`` charges 2 to the default limits too ("charged to every cap of its hit"): with
    ``FREQGUARD_DEFAULT_LIMITS = "4/minute"`` the route admits 2 requests a minute where
    Flask-Limiter admits 4 (5 with its default override). The page has no cost row, and
    its route-limit row says only that the defaults hold beside the cap."""
    pytest.importorskip("flask_limiter")
    import limits.storage.memory
    from flask import Flask
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    from freqguard.integrations.flask import FreqGuard

    clock = ManualClock(START)
    monkeypatch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=clock.now))

    theirs = Flask("theirs")
    limiter = Limiter(
        get_remote_address, app=theirs, storage_uri="memory://", default_limits=["4/minute"]
    )
    theirs.add_url_rule(
        "/a", "a", limiter.limit("10/minute", cost=2, override_defaults=False)(lambda: "ok")
    )
    ours = Flask("ours")
    ours.config["FREQGUARD_DEFAULT_LIMITS"] = "4/minute"
    fg = FreqGuard(ours, guard=Guard(MemoryBackend(clock)))
    ours.add_url_rule("/a", "a", fg.capped("10/minute", cost=2)(lambda: "ok"))

    said = [[app.test_client().get("/a").status_code for _ in range(6)] for app in (theirs, ours)]
    assert said[0] == [200, 200, 200, 200, 429, 429]  # the default limit counts 1 a request
    assert said[1] == said[0]


def test_limits_cluster_url_of_several_nodes() -> None:
    """limits documents its cluster URL as ``redis+cluster://[:password]@host:port,host:port``
    (``storage_from_string`` takes it: each host a startup node). The limits page says
    ``backend_from_url`` is "the same for ... redis+cluster://" (the throttled-py page too),
    and freqguard's own Sentinel URLs take ``host:port,host:port``; this one is refused as
    "port must be an integer >= 1 and <= 65535, got '7000,localhost:7001'", an error about
    a port that names neither the form nor the fix. Taken (several startup nodes), or
    refused naming the form to write, would do; the port error does not."""
    pytest.importorskip("limits")
    from limits.storage import RedisClusterStorage

    from freqguard.backends.urls import parse_url

    url = "redis+cluster://localhost:7000,localhost:7001"
    assert "host:port,host:port" in (RedisClusterStorage.__init__.__doc__ or "")  # theirs
    try:
        target = parse_url(url)
    except ConfigError as refused:
        message = str(refused)
        assert "port must be" not in message, message
        assert "redis+cluster://host:port" in message, message
    else:
        assert target.kind == "cluster"


def test_limits_fixed_window_starts_at_a_keys_first_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    """limits' ``FixedWindowRateLimiter`` starts a key's window at its first hit (the
    storage's counter expires a window after it is made); ``strategy="fixed-window"``
    starts windows on multiples of their length. The limits page's row for it names one
    difference only (limits counts a denied hit), so a port reads as the same on hits that
    fit; it is not: 2/minute, hits 10 s and 5 s before a minute's edge and 5 s after it,
    limits denies the third (its window runs 50 s more), freqguard admits it (a new
    window): three in 15 s, up to twice the rate at every edge, with nothing on the page."""
    import limits.storage.memory
    from limits import parse, storage, strategies

    clock = ManualClock(START)
    monkeypatch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=clock.now))
    theirs = strategies.FixedWindowRateLimiter(storage.MemoryStorage())
    rule = Rule("2/minute", by="user", strategy="fixed-window")
    ours = Guard(MemoryBackend(), [Policy("api", rule)], clock=clock)
    item = parse("2/minute")
    edge = 60 - START % 60  # the next minute's edge, from START
    said = []
    for offset in (edge - 10, edge - 5, edge + 5):
        clock.set(START + offset)
        said.append((theirs.hit(item, "u"), ours.hit("api", user="u").allowed))
    assert [theirs for theirs, _ in said] == [True, True, False]
    assert [ours for _, ours in said] == [True, True, False]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RATELIMIT_VIEW", "myapp.views.ratelimited"),
        ("RATELIMIT_FAIL_OPEN", True),
        ("RATELIMIT_IPV6_MASK", 128),
        ("RATELIMIT_EXCEPTION_CLASS", "myapp.errors.Slow"),
    ],
)
def test_every_django_ratelimit_setting_is_warned_of(name: str, value: object) -> None:
    """The django-ratelimit page promises "``manage.py check`` warns of ``RATELIMIT_*``";
    it warns of three (``RATELIMIT_ENABLE``, ``_USE_CACHE``, ``_IP_META_KEY``). django-ratelimit
    reads seven more, and a project carrying one over hears nothing: ``RATELIMIT_VIEW``
    (their custom page for a refusal), ``RATELIMIT_FAIL_OPEN`` (admit when the cache
    fails), ``RATELIMIT_IPV6_MASK`` (the prefix an IPv6 client is keyed by; freqguard's is
    ``client_ip(ipv6_prefix=...)``), ``RATELIMIT_EXCEPTION_CLASS``: each silently ignored."""
    pytest.importorskip("django_ratelimit")
    from django.core import checks
    from django.test import override_settings

    from tests.integrations import django_site  # noqa: F401 -- configures Django

    with override_settings(**{name: value}):
        said = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    assert [m.id for m in said if name in m.msg] == ["freqguard.W001"], [m.msg for m in said]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RATELIMIT_ENABLED", False),  # the control: warned of today
        ("RATELIMIT_APPLICATION", "1000/hour"),
        ("RATELIMIT_STRATEGY", "fixed-window"),
        ("RATELIMIT_SWALLOW_ERRORS", True),
        ("RATELIMIT_KEY_PREFIX", "myapp"),
    ],
)
def test_every_flask_limiter_setting_is_warned_of(
    name: str, value: object, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/integrations.md and the Flask module say "Flask-Limiter's own ``RATELIMIT_*``
    keys are logged as a warning that names freqguard's"; five are (``RATELIMIT_DEFAULT``,
    ``_STORAGE_URI``/``_URL``, ``_ENABLED``, ``_HEADERS_ENABLED``). The others pass in
    silence, among them ``RATELIMIT_APPLICATION`` (an app-wide limit: the app loses it,
    unsaid) and ``RATELIMIT_SWALLOW_ERRORS`` (fail open: the app now answers 503 when the
    store fails). ``Limiter(application_limits=...)`` and ``swallow_errors=`` given to
    ``FreqGuard`` are refused naming the fix; the same options as config keys are not
    even warned of."""
    import logging

    from flask import Flask

    from freqguard.integrations.flask import FreqGuard

    app = Flask("ported")
    app.config[name] = value
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        FreqGuard(app, guard=Guard(MemoryBackend(ManualClock(START))))
    assert name in caplog.text


def _slowapi_cost(request: object) -> int:
    return 2


@pytest.mark.parametrize("cost", [_slowapi_cost, -1, "2", 5], ids=["callable", "-1", "'2'", "5>4"])
def test_a_limits_cost_is_checked_as_it_is_made(cost: object) -> None:
    """slowapi's ``@limiter.limit("4/minute", cost=lambda request: 2)`` takes a cost per
    request; written as ``Limit("/a", "4/minute", cost=...)`` (the slowapi page's row for a
    route limit) the cost is not checked: ``Limit`` and ``FreqGuardMiddleware`` take it,
    and every request to the route is then a 500 (the ConfigError "cost must be an
    integer >= 0" raised out of the app at each request). The same for a negative cost,
    a cost written as text, and one above the limit (the limits page's "a ConfigError
    naming the cost and the capacity", known here before any request). ``limit_dependency``
    takes them alike. A bad cost should be refused as the limit is made."""
    pytest.importorskip("starlette")
    from starlette.applications import Starlette

    from freqguard import AsyncGuard
    from freqguard.integrations.fastapi import limit_dependency
    from freqguard.integrations.starlette import FreqGuardMiddleware, Limit

    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(START))
    with pytest.raises(ConfigError, match="cost"):
        FreqGuardMiddleware(
            Starlette(),
            guard=guard,
            limits=[Limit("/a", "4/minute", cost=cost)],  # type: ignore[arg-type]
        )
    with pytest.raises(ConfigError, match="cost"):
        limit_dependency(guard, "4/minute", cost=cost, name="a")  # type: ignore[arg-type]
