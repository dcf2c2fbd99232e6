"""The hostile-argument sweep (``tests/unit/test_hostile_arguments.py``: its values and its
check) over what it did not reach: every ``FREQGUARD_*`` setting Flask's ``init_app`` reads,
``fg.capped(...)``'s and ``fg.exempt(...)``'s arguments, and ``capped_task(...)``'s. Each
value is taken, or refused by freqguard with a short message naming the setting or the
argument: never Python's ValueError from printing an integer past 4,300 digits, a
RecursionError from printing a nested list, a value's own ``__repr__``'s error, nor a
message holding a 1 MB string whole. Django's and DRF's are in
``test_settings_hostile_django.py``."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from freqguard import Guard, MemoryBackend, Policy, Rule
from freqguard.integrations.flask import FreqGuard
from tests.unit.test_hostile_arguments import (
    Call,
    sweep,
)

_SETTINGS = [
    "FREQGUARD_DEFAULT_LIMITS",
    "FREQGUARD_APPLICATION_LIMITS",
    "FREQGUARD_HEADERS",
    "FREQGUARD_ENABLED",
    "FREQGUARD_BACKEND",
    "FREQGUARD_CONFIG",
    "FREQGUARD_KEY",  # Django's: refused by Flask as unknown, naming it
]
#: What a refusal of each setting names: the setting (the backend's and the configuration
#: file's name what they read, a backend URL or a configuration file).
_NAMES = {
    "FREQGUARD_BACKEND": "FREQGUARD_BACKEND",
    "FREQGUARD_CONFIG": "FREQGUARD_CONFIG|configuration file",
}


def _view() -> str:
    return "ok"


def _served(setting: str, value: object) -> None:
    """An app given ``setting = value`` set up and serving one request (an error past
    ``init_app`` would be every request's 500)."""
    app = Flask(__name__)
    app.config[setting] = value
    app.add_url_rule("/", "index", _view)
    FreqGuard(app)
    assert app.test_client().get("/").status_code == 200


_SMS = Policy("sms", Rule("5/minute", by="recipient"))


def _send(*args: object, recipient: str) -> None: ...  # with bind=True or not


def _task(**given: Any) -> None:
    celery = pytest.importorskip("celery", reason="the celery extra is not installed")
    app = celery.Celery("hostile", broker="memory://", set_as_current=False)
    from freqguard.integrations.celery import capped_task

    arguments: dict[str, Any] = {"app": app, "policy": _SMS, "guard": Guard(MemoryBackend())}
    arguments.update(given)
    try:
        task_app, policy = arguments.pop("app"), arguments.pop("policy")
        capped_task(task_app, policy, **arguments)(_send)
    finally:
        app.close()


def _capped(argument: str) -> Call:
    def call(guard: Guard, value: object) -> object:
        given: dict[str, Any] = {"rule": "5/minute", argument: value}
        return FreqGuard().capped(given.pop("rule"), **given)(_view)

    return call


def _setting(setting: str) -> Call:
    def call(guard: Guard, value: object) -> object:
        _served(setting, value)
        return None

    return call


CALLS: dict[str, tuple[str, Call]] = {
    **{setting: (_NAMES.get(setting, setting), _setting(setting)) for setting in _SETTINGS},
    **{
        f"fg.capped {argument}": (
            argument if argument != "rule" else "rule|rate",
            _capped(argument),
        )
        for argument in ("rule", "key", "cost", "name", "shared", "defaults", "methods")
    },
    "fg.capped deduct_when": ("deduct_when", _capped("deduct_when")),
    "fg.exempt": ("exempt", lambda g, v: FreqGuard().exempt(v)),  # type: ignore[call-overload]
    "FreqGuard guard": ("guard", lambda g, v: FreqGuard(guard=v)),  # type: ignore[arg-type]
    "FreqGuard key": ("key", lambda g, v: FreqGuard(key=v)),  # type: ignore[arg-type]
    "capped_task app": ("app", lambda g, v: _task(app=v)),
    "capped_task policy": ("policy", lambda g, v: _task(policy=v)),
    "capped_task guard": ("guard", lambda g, v: _task(guard=v)),
    "capped_task on_denied": ("on_denied", lambda g, v: _task(on_denied=v)),
    "capped_task rate_limit": ("rate_limit", lambda g, v: _task(rate_limit=v)),
    "capped_task bind": ("bind", lambda g, v: _task(bind=v)),
}


(
    test_each_hostile_value_is_taken_or_refused_naming_it,
    test_a_drawn_hostile_value_is_taken_or_refused_naming_it,
) = sweep(CALLS, 10)
