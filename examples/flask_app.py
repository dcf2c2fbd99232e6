"""A Flask API with FreqGuard.

    flask --app examples.flask_app run

Every view gets ``FREQGUARD_DEFAULT_LIMITS`` (100/minute per client) unless exempt;
``/sms`` is capped at 3/minute.
"""

from __future__ import annotations

from flask import Flask

from freqguard.integrations.flask import FreqGuard

fg = FreqGuard()


def build(config: dict[str, object] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.update(FREQGUARD_BACKEND="memory://", FREQGUARD_DEFAULT_LIMITS="100/minute")
    app.config.update(config or {})
    fg.init_app(app)

    @app.post("/sms")
    @fg.capped("3/minute")
    def sms() -> dict[str, bool]:
        return {"sent": True}

    @app.get("/health")
    @fg.exempt
    def health() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/")
    def index() -> dict[str, str]:
        return {"hello": "world"}

    return app


app = build()
