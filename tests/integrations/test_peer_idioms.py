"""A peer's idiom carried over where freqguard takes another way is refused, or warned of,
naming freqguard's, never taken and ignored: django-ratelimit's header key, the peers'
``RATELIMIT_*`` settings, slowapi's cost per request (and any cost no rule holds). Each
found by running the peer beside freqguard (an independent review of docs/coming-from/);
the pages' rows are run both ways by the ``test_coming_from_*`` modules (a cost's row, a
fixed window's edges and throttled-py's ``timeout=`` on a cap that does not wait among
them, from the same review; limits' cluster URL of several nodes:
``tests/backends/test_cluster_urls.py``)."""

from __future__ import annotations

import pytest

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend
from tests.conftest import START


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
    # a migration running both: alone, RATELIMIT_APPLICATION is refused (the app would be
    # uncapped; test_coming_from_flask_limiter_review4.py)
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "5/minute"
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


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        ("key_func", "key= here"),
        ("per_method", "a Limit per method"),
        ("exempt_when", "SkipRequest"),
        ("error_message", "problem document"),
        ("override_defaults", "the first that matches decides"),
        ("scope", "name= here"),
    ],
)
def test_slowapis_limit_arguments_name_ours(name: str, ours: str) -> None:
    """slowapi's ``limit()`` arguments given to ``Limit`` (its page's row for a route
    limit) were Python's bare TypeError; they name freqguard's way, as Flask's
    ``fg.capped`` does for Flask-Limiter's. Any other name is still a TypeError."""
    from freqguard.integrations.starlette import Limit

    with pytest.raises(ConfigError, match=f"slowapi's {name}=.*{ours}"):
        Limit("/a", "4/minute", **{name: None})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        Limit("/a", "4/minute", nope=1)  # type: ignore[arg-type]
