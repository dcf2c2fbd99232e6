"""A Flask route's cost against every rule its one hit holds (the default limits, a
blueprint's cost a view inherits), refused at ``init_app``: each an adversarial review's
finding of the day's cost checks, written failing first."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Blueprint, Flask

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.integrations.flask import FreqGuard
from tests.conftest import START


def _view_over_default_limits(app: Flask, fg: FreqGuard) -> None:
    """Flask-Limiter's page row: ``@limiter.limit("10/minute", cost=5)`` is
    ``@fg.capped("10/minute", cost=5)``; the cost is charged to the default limits too."""
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "2/minute"

    @app.get("/report")
    @fg.capped("10/minute", cost=5)
    def report() -> str:
        return "report"


def _blueprint_cost_over_a_narrower_view(app: Flask, fg: FreqGuard) -> None:
    """A view's cost defaults to its blueprint's: 5, which the view's own 2/minute cannot
    hold; each cap alone passes check_cost (5 <= 100; the view gave no cost)."""
    api = Blueprint("api", __name__, url_prefix="/api")
    fg.capped("100/minute", cost=5)(api)

    @api.get("/report")
    @fg.capped("2/minute")
    def report() -> str:
        return "report"

    app.register_blueprint(api)


@pytest.mark.parametrize(
    "build",
    [_view_over_default_limits, _blueprint_cost_over_a_narrower_view],
    ids=["default-limits", "blueprint-cost"],
)
def test_a_cost_the_routes_caps_cannot_hold_is_refused_at_init_app(
    build: Callable[[Flask, FreqGuard], None],
) -> None:
    """``fg.capped`` now refuses a cost above its own rates as the cap is made ("every
    request to the route was a 500"), but a route's hit holds more than the cap's rates:
    the default limits (charged the same cost, as the Flask-Limiter page says) and a
    blueprint's cost, which a view without one inherits. Either way the route's hit
    costs more than its narrowest rule holds, and every request to it is still a 500
    (the guard's "cost 5 exceeds the capacity 2 ... no hit of that cost could ever be
    allowed", raised out of the view), known only when traffic comes. ``init_app``
    checks each route's caps already (a shared cap over a view's own cap is refused
    there); the route's cost against its narrowest rule belongs with it."""
    app = Flask(__name__)
    fg = FreqGuard(guard=Guard(MemoryBackend(), clock=ManualClock(START)))
    build(app, fg)
    with pytest.raises(ConfigError, match=r"cost 5 exceeds the capacity 2"):
        fg.init_app(app)
