"""Django settings that would pass silently are refused: an unknown ``FREQGUARD_*`` setting
names the one meant, through ``manage.py check`` (the system checks) and when the middleware
starts; bad values name what is allowed; django-ratelimit's settings are a warning."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import Client, override_settings

from freqguard.errors import ConfigError
from freqguard.integrations.django import FreqGuardMiddleware
from tests.integrations import django_site  # noqa: F401 -- configures Django


def _ok(request: object) -> object:
    return request


def _messages() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("FREQGUARD_DEFAULT_LIMIT", "FREQGUARD_DEFAULT_LIMITS"),
        ("FREQGUARD_STORAGE_URI", "FREQGUARD_BACKEND"),
        ("FREQGUARD_HEADER", "FREQGUARD_HEADERS"),
        ("FREQGUARD_ENABLE", "FREQGUARD_ENABLED"),
        ("FREQGUARD_DEFUALT_LIMITS", "FREQGUARD_DEFAULT_LIMITS"),
    ],
)
def test_an_unknown_setting_is_a_check_error_naming_the_one_meant(name: str, meant: str) -> None:
    with override_settings(**{name: "2/minute"}):
        [message] = _messages()
        assert message.id == "freqguard.E001"
        assert message.level == checks.ERROR
        assert f"unknown setting {name}: did you mean {meant}?" in message.msg
        with pytest.raises(ConfigError, match=f"unknown setting {name}: did you mean {meant}"):
            FreqGuardMiddleware(_ok)


def test_manage_py_check_shows_it_and_fails() -> None:
    with (
        override_settings(FREQGUARD_DEFAULT_LIMIT="2/minute"),
        pytest.raises(SystemCheckError, match=r"freqguard\.E001.*FREQGUARD_DEFAULT_LIMITS"),
    ):
        call_command("check", stdout=StringIO(), stderr=StringIO())
    out = StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()


def test_the_middleware_refuses_to_start_with_it() -> None:
    with override_settings(FREQGUARD_DEFAULT_LIMIT="2/minute"), pytest.raises(ConfigError):
        Client().get("/plain")  # the handler loads the middleware: it raises


def test_an_unlike_name_lists_what_freqguard_reads() -> None:
    with override_settings(FREQGUARD_SOMETHING_ELSE=1):
        [message] = _messages()
    assert "freqguard reads FREQGUARD_BACKEND, FREQGUARD_CONFIG" in message.msg


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"FREQGUARD_ENABLED": "no"}, "FREQGUARD_ENABLED must be True or False, got 'no'"),
        ({"FREQGUARD_HEADERS": "fancy"}, "unknown header profile 'fancy'"),
        (
            {"FREQGUARD_DEFAULT_LIMITS": "often"},
            "FREQGUARD_DEFAULT_LIMITS: cannot parse rate 'often'",
        ),
        ({"FREQGUARD_DEFAULT_LIMITS": 5}, "FREQGUARD_DEFAULT_LIMITS must be rates"),
        ({"FREQGUARD_BACKEND": "mongodb://x"}, "mongodb"),
        ({"FREQGUARD_BACKEND": 42}, "FREQGUARD_BACKEND must be a backend URL"),
        ({"FREQGUARD_KEY": "ip"}, "FREQGUARD_KEY must be a key function"),
        (
            {"FREQGUARD_BACKEND": "memory://", "FREQGUARD_CONFIG": "x.toml"},
            "set it or FREQGUARD_BACKEND, not both",
        ),
    ],
)
def test_a_bad_value_is_a_check_error_and_refused(settings: dict[str, object], says: str) -> None:
    with override_settings(**settings):
        messages = _messages()  # the pair of FREQGUARD_CONFIG's: its missing file too
        assert {message.id for message in messages} == {"freqguard.E002"}
        assert any(says in message.msg for message in messages)
        with pytest.raises(ConfigError, match=says):
            FreqGuardMiddleware(_ok)


def test_every_bad_value_is_a_check_error_of_its_own_and_all_are_refused_at_once() -> None:
    """Three bad values were one check error, the first's: each fixed, the next showed,
    one run each. Each is an error of its own now, and the middleware names them all."""
    bad = {"FREQGUARD_ENABLED": "no", "FREQGUARD_DEFAULT_LIMITS": 5, "FREQGUARD_HEADERS": "x"}
    with override_settings(**bad):
        messages = _messages()
        assert [m.id for m in messages] == ["freqguard.E002"] * 3
        with pytest.raises(ConfigError) as refused:
            FreqGuardMiddleware(_ok)
    told = str(refused.value)
    assert "FREQGUARD_ENABLED" in told
    assert "FREQGUARD_DEFAULT_LIMITS" in told
    assert "header profile 'x'" in told


def test_django_ratelimits_settings_are_a_warning_naming_freqguards() -> None:
    with override_settings(RATELIMIT_ENABLE=False):
        [message] = _messages()
        FreqGuardMiddleware(_ok)  # a warning: it starts
    assert message.id == "freqguard.W001"
    assert message.level == checks.WARNING
    assert "RATELIMIT_ENABLE is django-ratelimit's setting" in message.msg
    assert "set FREQGUARD_ENABLED" in message.msg
