"""Flask settings that would pass silently are refused: an unknown ``FREQGUARD_*`` key names
the one meant (``FREQGUARD_DEFAULT_LIMIT`` left the app uncapped), Flask-Limiter's keys get a
warning naming freqguard's, and ``FREQGUARD_ENABLED`` switches the app's caps off. The app's
own error handlers win over the extension's, registered before it or after, and a handler
for 429 (Flask-Limiter's idiom), which never sees freqguard's denials, gets a warning. A
guard that is none (a backend, a URL, an AsyncGuard) is refused as the extension is made."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from flask import Flask

import freqguard as fg
from freqguard import BackendUnavailable, CapExceeded, ConfigError, Rule
from freqguard.integrations.flask import BadRequest, FreqGuard
from tests.conftest import START


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


@pytest.mark.parametrize(
    ("key", "argument"),
    [
        ("FREQGUARD_ON_ERROR", "on_error"),
        ("FREQGUARD_FAIL_OPEN", "on_error"),
        ("FREQGUARD_PREFIX", "prefix"),
    ],
)
def test_a_guards_argument_as_a_setting_names_the_guard(key: str, argument: str) -> None:
    """Failing open is the guard's ``on_error``: the setting a new user tried was met with
    "did you mean FREQGUARD_CONFIG?" (a new user's first hour)."""
    with pytest.raises(ConfigError, match=f"{key}: {argument} is the guard's") as refused:
        FreqGuard(_app(**{key: "allow"}))
    assert f"guard=Guard(backend_from_url(url), {argument}=" in str(refused.value)


def test_an_unknown_setting_unlike_any_lists_them_all() -> None:
    with pytest.raises(
        ConfigError,
        match="freqguard reads FREQGUARD_APPLICATION_LIMITS, FREQGUARD_BACKEND, FREQGUARD_CONFIG",
    ):
        FreqGuard(_app(FREQGUARD_SOMETHING_ELSE=1))


def test_flask_limiters_keys_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        # beside a limit of freqguard's (alone, RATELIMIT_DEFAULT is refused: the app would
        # be uncapped; test_coming_from_flask_limiter_review4.py)
        FreqGuard(
            _app(
                RATELIMIT_DEFAULT="2/minute",
                RATELIMIT_STORAGE_URI="memory://",
                FREQGUARD_DEFAULT_LIMITS="5/minute",
            )
        )
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


def _mine(error: Exception) -> tuple[str, int]:
    return f"mine: {type(error).__name__}", 418


@pytest.mark.parametrize("order", ["handler first", "extension first"])
@pytest.mark.parametrize("error", [CapExceeded, BadRequest, BackendUnavailable])
def test_the_apps_own_error_handler_wins_registered_before_or_after(
    order: str, error: type[Exception]
) -> None:
    """Flask keeps one handler a class, the last registered: ``FreqGuard(app)`` replaced a
    handler the app had registered before it, silently (found porting Flask-Limiter's
    ``on_breach``; seen failing first)."""
    app = _app(FREQGUARD_DEFAULT_LIMITS="1/minute")

    @app.route("/raise")
    def raising() -> str:
        raise error("the view's")

    if order == "handler first":
        app.register_error_handler(error, _mine)
    FreqGuard(app)
    if order == "extension first":
        app.register_error_handler(error, _mine)
    client = app.test_client()
    if error is CapExceeded:
        answered = [client.get("/") for _ in range(2)][1]  # denied by the default limit
    else:
        answered = client.get("/raise")
    assert (answered.status_code, answered.text) == (418, f"mine: {error.__name__}")


def test_a_handler_for_429_is_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Flask-Limiter's denial is an HTTP 429 error, which its users answer with
    ``@app.errorhandler(429)``; freqguard's is CapExceeded, which such a handler never sees:
    the first request warns, naming the fix, instead of passing it over in silence."""
    app = _app(FREQGUARD_DEFAULT_LIMITS="1/minute")
    FreqGuard(app)
    app.register_error_handler(429, _mine)  # after the extension: seen at the first request
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        codes = [app.test_client().get("/").status_code for _ in range(3)]
    assert codes == [200, 429, 429]  # freqguard's answer, not the handler's 418
    [record] = [r for r in caplog.records if "429" in r.getMessage()]
    assert "@app.errorhandler(CapExceeded)" in record.getMessage()
    answered = _app(FREQGUARD_DEFAULT_LIMITS="1/minute")  # handled both ways: no warning
    answered.register_error_handler(429, _mine)
    answered.register_error_handler(CapExceeded, _mine)
    FreqGuard(answered)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        codes = [answered.test_client().get("/").status_code for _ in range(2)]
    assert (codes, caplog.records) == ([200, 418], [])


# -- what the extension is given, refused as it is made (test_constructor_hostile.py's kin) --


def test_a_backend_given_as_the_guard_is_refused() -> None:
    """An empty MemoryBackend is falsy (``__len__``): ``self._guard or ...`` drops it, and
    the app counts on a new ``memory://`` guard (its own clock, not this one), silently."""
    with pytest.raises(ConfigError, match=r"Guard\("):
        FreqGuard(_app(), guard=fg.MemoryBackend(fg.ManualClock(START)))  # type: ignore[arg-type]


def test_an_async_guard_is_refused_at_init_app() -> None:
    """Taken today: every request is then a 500, AttributeError "'coroutine' object has no
    attribute 'allowed'" (and a coroutine never awaited)."""
    app = _app(FREQGUARD_DEFAULT_LIMITS="1/minute")
    with pytest.raises(ConfigError, match=r"Guard"):
        FreqGuard(app, guard=fg.AsyncGuard(fg.MemoryBackend()))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "guard",
    ["memory://", 5, fg.Policy("p", fg.Rule("1/minute"))],
    ids=["a URL", "an int", "a Policy"],
)
def test_a_guard_that_is_no_guard_is_refused(guard: object) -> None:
    """Today: AttributeError "'str' object has no attribute 'add_policy'"."""
    with pytest.raises(ConfigError, match=r"guard"):
        FreqGuard(_app(), guard=guard)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [5, False, b"freqguard.toml"], ids=repr)
def test_a_config_setting_not_a_path_is_named(path: object) -> None:
    """Today: TypeError "expected str, bytes or os.PathLike object, not int" from ``load``."""
    with pytest.raises(ConfigError, match=r"FREQGUARD_CONFIG"):
        FreqGuard(_app(FREQGUARD_CONFIG=path))


def test_a_backend_setting_beside_a_guard_is_refused() -> None:
    """``FREQGUARD_CONFIG`` beside ``guard=`` is refused ("not both"); ``FREQGUARD_BACKEND``
    beside it is dropped silently: the app counts on the guard's memory, not on Redis."""
    app = _app(FREQGUARD_BACKEND="redis://localhost:1/0", FREQGUARD_DEFAULT_LIMITS="1/minute")
    with pytest.raises(ConfigError, match=r"FREQGUARD_BACKEND"):
        FreqGuard(app, guard=fg.Guard(fg.MemoryBackend()))


def _setting_values() -> Any:
    from hypothesis import strategies as st

    from tests.integrations.hostile_rig import _json_values

    rates = st.sampled_from(["2/minute", "1/hour; 5/day", "0/s", "3 a fortnight", "1/0s", ""])
    rules = st.builds(
        lambda rate, by: [Rule(rate, by=by)],
        st.sampled_from(["2/minute", "5000/day"]),
        st.sampled_from(["client", "user", "ident"]),
    )
    return st.one_of(rates, rules, _json_values(), st.lists(rates, max_size=3))


def test_hostile_settings_build_a_serving_app_or_fail_init_app_naming_the_setting() -> None:
    """Any value of the rate settings (``FREQGUARD_DEFAULT_LIMITS``,
    ``FREQGUARD_APPLICATION_LIMITS``), the profile and the switch: ``init_app`` refuses it
    naming the setting, or the app it built answers a request (200 or 429, never a 500)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tests.conftest import examples

    names = st.sampled_from(
        [
            "FREQGUARD_DEFAULT_LIMITS",
            "FREQGUARD_APPLICATION_LIMITS",
            "FREQGUARD_HEADERS",
            "FREQGUARD_ENABLED",
        ]
    )

    @settings(max_examples=examples(40), deadline=None)
    @given(st.dictionaries(names, _setting_values(), min_size=1, max_size=3))
    def check(given_settings: dict[str, object]) -> None:
        app = _app(**given_settings)
        try:
            FreqGuard(app)
        except ConfigError as error:
            refused = str(error)
            assert any(name in refused for name in given_settings), refused
            return
        app.add_url_rule("/a", "a", lambda: "a")
        codes = [app.test_client().get("/a").status_code for _ in range(3)]
        assert set(codes) <= {200, 429}, codes

    check()
