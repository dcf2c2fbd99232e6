"""Flask settings that would pass silently are refused: an unknown ``FREQGUARD_*`` key names
the one meant (``FREQGUARD_DEFAULT_LIMIT`` left the app uncapped), Flask-Limiter's keys get a
warning naming freqguard's, and ``FREQGUARD_ENABLED`` switches the app's caps off."""

from __future__ import annotations

import logging

import pytest
from flask import Flask

from freqguard import ConfigError
from freqguard.integrations.flask import FreqGuard


def _app(**settings: object) -> Flask:
    app = Flask(__name__)
    app.config.update(settings)

    @app.route("/")
    def index() -> str:
        return "ok"

    return app


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("FREQGUARD_DEFAULT_LIMIT", "FREQGUARD_DEFAULT_LIMITS"),
        ("FREQGUARD_STORAGE_URI", "FREQGUARD_BACKEND"),
        ("FREQGUARD_URL", "FREQGUARD_BACKEND"),
        ("FREQGUARD_HEADER", "FREQGUARD_HEADERS"),
        ("FREQGUARD_ENABLE", "FREQGUARD_ENABLED"),
    ],
)
def test_an_unknown_setting_is_refused_naming_the_one_meant(key: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown setting {key}: did you mean {meant}"):
        FreqGuard(_app(**{key: "2/minute"}))


def test_an_unknown_setting_unlike_any_lists_them_all() -> None:
    with pytest.raises(ConfigError, match="freqguard reads FREQGUARD_BACKEND, FREQGUARD_CONFIG"):
        FreqGuard(_app(FREQGUARD_SOMETHING_ELSE=1))


def test_flask_limiters_keys_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        FreqGuard(_app(RATELIMIT_DEFAULT="2/minute", RATELIMIT_STORAGE_URI="memory://"))
    text = caplog.text
    assert "RATELIMIT_DEFAULT is Flask-Limiter's setting" in text
    assert "set FREQGUARD_DEFAULT_LIMITS" in text
    assert "set FREQGUARD_BACKEND" in text


def test_the_app_wide_switch() -> None:
    on = _app(FREQGUARD_DEFAULT_LIMITS="2/minute")
    FreqGuard(on)
    capped = [on.test_client().get("/") for _ in range(3)]
    assert [r.status_code for r in capped] == [200, 200, 429]
    assert _rate_headers(capped[0])
    off = _app(FREQGUARD_DEFAULT_LIMITS="2/minute", FREQGUARD_ENABLED=False)
    FreqGuard(off)
    responses = [off.test_client().get("/") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert _rate_headers(responses[0]) == []
    with pytest.raises(ConfigError, match="FREQGUARD_ENABLED must be True or False, got 'no'"):
        FreqGuard(_app(FREQGUARD_ENABLED="no"))


def _rate_headers(response: object) -> list[str]:
    return [name for name, _ in response.headers if name.lower().startswith("ratelimit")]  # type: ignore[attr-defined]
