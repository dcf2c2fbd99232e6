"""What the Flask blueprint tests share (``test_flask_blueprints.py``,
``test_flask_blueprint_refusals.py``): an app on a MemoryBackend and a given clock, with its
default limits and settings, that a build function fills, and a ``/page`` view outside
any blueprint."""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.integrations.flask import FreqGuard

Build = Callable[[Flask, FreqGuard], None]


def _app(clock: ManualClock, defaults: str | None, build: Build, **settings: object) -> Flask:
    app = Flask(__name__)
    app.config.update(FREQGUARD_DEFAULT_LIMITS=defaults, **settings)
    fg = FreqGuard(app, guard=Guard(MemoryBackend(), clock=clock))
    build(app, fg)
    return app


def _page(app: Flask) -> None:
    @app.get("/page")
    def page() -> str:
        return "page"
