"""What a Flask-Limiter user writes to the Flask extension out of habit is refused naming
freqguard's way (docs/coming-from/flask-limiter.md), never a raw ``TypeError`` or
``AttributeError`` that leaves them to guess it (found by a new user coming from it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations.flask import FreqGuard


def get_remote_address() -> str:
    """Flask-Limiter's key function: it takes nothing and reads ``flask.request``."""
    return "127.0.0.1"


def test_a_key_function_as_the_first_argument_is_refused_naming_key() -> None:
    app = Flask(__name__)
    made_by: list[Callable[[], object]] = [
        lambda: FreqGuard(get_remote_address, app=app),  # type: ignore[arg-type]
        lambda: FreqGuard(get_remote_address),  # type: ignore[arg-type]
    ]
    for made in made_by:
        with pytest.raises(ConfigError) as found:
            made()
        message = str(found.value)
        assert "get_remote_address" in message  # the value
        assert "FreqGuard(app" in message
        assert "key=" in message
        assert "flask-limiter.md" in message  # the row
    assert "freqguard" not in app.extensions  # nothing half set up


def test_what_is_neither_an_app_nor_none_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"FreqGuard's first argument is the Flask app.*'x'"):
        FreqGuard("x")  # type: ignore[arg-type]


def test_app_by_keyword_still_works(clock: ManualClock) -> None:
    app = Flask(__name__)
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "1/minute"
    FreqGuard(app=app, guard=Guard(MemoryBackend(), clock=clock))
    app.add_url_rule("/a", "a", lambda: "a")
    client = app.test_client()
    assert [client.get("/a").status_code for _ in range(2)] == [200, 429]
    with pytest.raises(TypeError, match="app given twice"):
        FreqGuard(app, app=app)


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [
        ({"default_limits": ["2/minute"]}, 'app.config["FREQGUARD_DEFAULT_LIMITS"] = "2/minute'),
        ({"key_func": get_remote_address}, "key="),
        ({"storage_uri": "redis://h"}, 'app.config["FREQGUARD_BACKEND"]'),
        ({"headers_enabled": True}, 'app.config["FREQGUARD_HEADERS"]'),
        ({"enabled": False}, 'app.config["FREQGUARD_ENABLED"]'),
        ({"on_breach": print}, "@app.errorhandler(CapExceeded)"),
        ({"strategy": "fixed-window"}, "Rule("),
        ({"application_limits": ["9/minute"]}, "FREQGUARD_APPLICATION_LIMITS"),
        ({"swallow_errors": True}, 'on_error="allow"'),
        ({"in_memory_fallback_enabled": True}, "on_error="),
        ({"default_limits_exempt_when": print}, "SkipRequest"),
    ],
)
def test_limiters_arguments_are_refused_naming_ours(theirs: dict[str, Any], ours: str) -> None:
    [(name, _)] = theirs.items()
    with pytest.raises(ConfigError, match=re.escape(f"Flask-Limiter's {name}=")) as found:
        FreqGuard(Flask(__name__), **theirs)
    assert ours in str(found.value)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        FreqGuard(Flask(__name__), bogus=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "ours"),
    [("limit", "fg.capped("), ("shared_limit", "name="), ("request_filter", "SkipRequest")],
)
def test_limiters_methods_are_refused_naming_ours(method: str, ours: str) -> None:
    fg = FreqGuard()
    with pytest.raises(AttributeError, match=re.escape(f"Flask-Limiter's {method}")) as found:
        getattr(fg, method)
    assert ours in str(found.value)
    with pytest.raises(AttributeError, match="has no attribute 'bogus'"):
        fg.bogus  # type: ignore[attr-defined]  # noqa: B018


def test_a_policy_is_refused_without_saying_it_is_allowed() -> None:
    """``fg.capped(Policy(...))`` said "must be a rate string, Rule or Policy" while
    refusing a Policy: the message names what capped takes and how to give its rules."""
    policy = Policy("pp", Rule("1/minute", by="client"))
    with pytest.raises(ConfigError) as found:
        FreqGuard().capped(policy)  # type: ignore[arg-type]
    message = str(found.value)
    assert "or Policy" not in message
    assert "Limit" not in message
    assert "Policy('pp'" in message
    assert "fg.capped(policy.rules)" in message


def test_a_callable_limit_is_refused_naming_tiers() -> None:
    """Flask-Limiter's callable limit (a rate per request) is a tier here."""
    with pytest.raises(ConfigError) as found:
        FreqGuard().capped(lambda: "3/minute")  # type: ignore[arg-type]
    message = str(found.value)
    assert "rate_for=TierRates(" in message
    assert "flask-limiter.md" in message
