"""Hostile construction-time values of the Django integration's settings and of DRF
throttle classes: refused when read (``manage.py check``, the middleware's start) or when
the class is made, with a named error, never taken silently nor a raw TypeError. The other
integrations' are in ``test_constructor_hostile.py``."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("django")
from tests.integrations import django_site

django_site.setup()
from django.test import override_settings  # noqa: E402

from freqguard import ConfigError  # noqa: E402
from freqguard.integrations._django_settings import read_settings  # noqa: E402
from freqguard.integrations.django import user_or_ip  # noqa: E402


@pytest.mark.parametrize("path", [5, b"freqguard.toml"], ids=repr)
def test_a_config_setting_not_a_path_is_named(path: object) -> None:
    """Today: TypeError "expected str, bytes or os.PathLike object, not int" (bytes:
    "argument should be a str object or an os.PathLike object returning str")."""
    with (
        override_settings(FREQGUARD_CONFIG=path),
        pytest.raises(ConfigError, match=r"FREQGUARD_CONFIG"),
    ):
        read_settings()


async def _async_key(request: Any) -> str:
    return "k"


@pytest.mark.parametrize(
    "key",
    [lambda: "k", lambda group, request: "k", _async_key],
    ids=["Flask-Limiter's (no argument)", "django-ratelimit's (group, request)", "async"],
)
def test_a_key_setting_that_cannot_key_a_request_is_refused(key: Any) -> None:
    """``capped(key=...)`` refuses each of these (the key check); ``FREQGUARD_KEY`` is only
    checked to be callable, so ``manage.py check`` passes and every request is a 500."""
    with override_settings(FREQGUARD_KEY=key), pytest.raises(ConfigError, match=r"FREQGUARD_KEY"):
        read_settings()


@pytest.mark.parametrize("cost", [-1, 1.5, "1", True], ids=repr)
def test_a_throttle_cost_of_the_wrong_kind_is_refused_when_the_class_is_made(cost: object) -> None:
    """A throttle class's attributes DRF's counting reads are refused as the class is made;
    its ``cost`` is read only at a request: ConfigError "cost must be an integer >= 0"
    there, a 500 on every request of every view using it."""
    pytest.importorskip("rest_framework")
    from freqguard.integrations.drf import FreqGuardThrottle

    with pytest.raises(ConfigError, match=r"cost"):
        type("Costly", (FreqGuardThrottle,), {"rate": "5/minute", "cost": cost})


def test_user_or_ip_given_uncalled_as_the_key_setting_is_refused() -> None:
    """``FREQGUARD_KEY = user_or_ip`` (docs/django.md writes ``user_or_ip(["10.0.0.0/8"])``;
    the parentheses forgotten): ``client_ip`` uncalled is refused naming the call (checked
    beside this: ``FREQGUARD_KEY=client_ip`` raises "call it, key=client_ip(...)"), while
    ``user_or_ip`` takes one argument and passes; at each request ``user_or_ip(request)``
    raises ConfigError "trusted_proxies must be an address or network ... got
    <RequestInfo ...>": a 500 on every request, ``manage.py check`` clean."""
    with (
        override_settings(FREQGUARD_KEY=user_or_ip),
        pytest.raises(ConfigError, match=r"user_or_ip\("),
    ):
        read_settings()


def test_a_throttle_cost_computed_by_a_property_is_left_to_each_request() -> None:
    """A class's ``cost`` as a property is read per instance, as before; only a plain
    class value is checked when the class is made."""
    pytest.importorskip("rest_framework")
    from freqguard.integrations.drf import FreqGuardThrottle

    costly = type(
        "Costly", (FreqGuardThrottle,), {"rate": "5/minute", "cost": property(lambda _: 2)}
    )
    assert costly.__name__ == "Costly"
