"""Hostile construction-time arguments of the Flask extension (``FreqGuard(app, guard=...)``,
``app.config``'s ``FREQGUARD_*``): refused at ``init_app`` with a named error, never taken
silently nor a raw AttributeError/TypeError from deep inside. The other integrations' are in
``test_constructor_hostile.py``."""

from __future__ import annotations

import pytest

pytest.importorskip("flask")
from flask import Flask

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.integrations.flask import FreqGuard
from tests.conftest import START


def _app(**config: object) -> Flask:
    app = Flask(__name__)
    app.config.update(config)

    @app.route("/x")
    def x() -> str:
        return "ok"

    return app


def test_a_backend_given_as_the_guard_is_refused() -> None:
    """An empty MemoryBackend is falsy (``__len__``): ``self._guard or ...`` drops it, and
    the app counts on a new ``memory://`` guard (its own clock, not this one), silently."""
    with pytest.raises(ConfigError, match=r"Guard\("):
        FreqGuard(_app(), guard=MemoryBackend(ManualClock(START)))  # type: ignore[arg-type]


def test_an_async_guard_is_refused_at_init_app() -> None:
    """Taken today: every request is then a 500, AttributeError "'coroutine' object has no
    attribute 'allowed'" (and a coroutine never awaited)."""
    with pytest.raises(ConfigError, match=r"Guard"):
        FreqGuard(_app(FREQGUARD_DEFAULT_LIMITS="1/minute"), guard=AsyncGuard(MemoryBackend()))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "guard", ["memory://", 5, Policy("p", Rule("1/minute"))], ids=["a URL", "an int", "a Policy"]
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
        FreqGuard(app, guard=Guard(MemoryBackend()))
