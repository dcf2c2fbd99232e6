"""The hostile-argument sweep (``tests/unit/test_hostile_arguments.py``: its values and its
check) over Django's ``FREQGUARD_*`` settings, read by the middleware and by the system
checks, ``@capped``'s arguments and DRF's ``DEFAULT_THROTTLE_RATES``: the middleware takes
a value or refuses it naming the setting; a check never crashes on one (``manage.py
check`` would show a traceback, not the problem): it reports it, in a short message."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

pytest.importorskip("django")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.test import override_settings  # noqa: E402

from freqguard import Guard  # noqa: E402
from freqguard.integrations.django import FreqGuardMiddleware, capped  # noqa: E402
from tests.unit.test_hostile_arguments import (  # noqa: E402
    FIXED,
    GENERATED,
    Call,
    sweep,
)

_SETTINGS = [
    "FREQGUARD_DEFAULT_LIMITS",
    "FREQGUARD_HEADERS",
    "FREQGUARD_ENABLED",
    "FREQGUARD_BACKEND",
    "FREQGUARD_CONFIG",
    "FREQGUARD_KEY",
]
_NAMES = {
    "FREQGUARD_BACKEND": "FREQGUARD_BACKEND",
    "FREQGUARD_CONFIG": "FREQGUARD_CONFIG|configuration file",
    "FREQGUARD_DEFAULT_LIMITS": "FREQGUARD_DEFAULT_LIMITS|rate",
}
_REST = django_site.SETTINGS["REST_FRAMEWORK"]


def _view(request: object) -> object:
    return request


def _started(setting: str, value: object) -> None:
    with override_settings(**{setting: value}):
        FreqGuardMiddleware(_view)


def _capped(argument: str) -> Call:
    def call(guard: Guard, value: object) -> object:
        given: dict[str, Any] = {"rule": "5/minute", argument: value}
        return capped(given.pop("rule"), **given)(_view)

    return call


def _setting(setting: str) -> Call:
    def call(guard: Guard, value: object) -> object:
        _started(setting, value)
        return None

    return call


CALLS: dict[str, tuple[str, Call]] = {
    **{setting: (_NAMES.get(setting, setting), _setting(setting)) for setting in _SETTINGS},
    **{
        f"capped {argument}": (argument if argument != "rule" else "rule|rate", _capped(argument))
        for argument in ("rule", "key", "cost", "name", "block", "methods")
    },
}


(
    test_each_hostile_value_is_taken_or_refused_naming_it,
    test_a_drawn_hostile_value_is_taken_or_refused_naming_it,
) = sweep(CALLS, 10)


def _checked(**given: Any) -> None:
    """The checks run on ``given`` settings: each problem a message, each short."""
    with override_settings(**given):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
    for message in found:
        assert len(message.msg) < 1000, (message.id, message.msg[:300])


_CHECKED: list[dict[str, Any]] = [
    *({setting: None} for setting in _SETTINGS),
    {"DEFAULT_THROTTLE_RATES": None},  # a scope's rate
    {"DEFAULT_THROTTLE_RATES": "whole"},  # the setting itself
]


def _check(where: dict[str, Any], value: object) -> None:
    [(name, part)] = where.items()
    if name != "DEFAULT_THROTTLE_RATES":
        _checked(**{name: value})
        return
    rates = {"user": value, "anon": value} if part is None else value
    _checked(REST_FRAMEWORK={**_REST, "DEFAULT_THROTTLE_RATES": rates})


@pytest.mark.parametrize(
    ("where", "index"),
    [(where, index) for where in range(len(_CHECKED)) for index in range(len(FIXED))],
)
def test_the_checks_report_each_hostile_setting_without_crashing(where: int, index: int) -> None:
    _check(_CHECKED[where], FIXED[index])


@pytest.mark.parametrize("where", range(len(_CHECKED)))
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=GENERATED)
def test_the_checks_report_a_drawn_hostile_setting_without_crashing(
    where: int, value: object
) -> None:
    _check(_CHECKED[where], value)
